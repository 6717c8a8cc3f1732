"""Entry-point inventory (AST): what a repository runs and which env keys it reads. Stdlib only."""
