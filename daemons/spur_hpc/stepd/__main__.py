from spur_hpc.stepd.daemon import main

raise SystemExit(main())
