"""Entry-point inventory (AST): what a repository can run and which env keys it reads. Stdlib only."""
