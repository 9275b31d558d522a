from spur_hpc.agent.daemon import main

raise SystemExit(main())
