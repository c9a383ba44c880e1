from txnmodel.cli import main

raise SystemExit(main())
