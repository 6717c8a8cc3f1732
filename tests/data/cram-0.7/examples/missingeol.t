  $ printf foo
  foo (no-eol)