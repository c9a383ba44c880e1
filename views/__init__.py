"""What people read, rendered from the data the checkers return (checkers return data; these
render it): the counterexample viewer's pages (:mod:`views.page` and a module per page:
:mod:`views.linearizability`, :mod:`views.transactional`, :mod:`views.trace`, :mod:`views.index`),
counterexamples as text (:mod:`views.report`), a ``verify`` run on the terminal
(:mod:`views.summary`) and progress on a terminal (:mod:`views.progress`)."""
