"""What people read: the counterexample viewer's pages, text reports, and progress on a terminal.
Checkers return data; these render it."""
