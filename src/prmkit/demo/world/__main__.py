"""`python -m prmkit.demo.world`: statistics of the world (`stats.main`)."""

from prmkit.demo.world.stats import main

raise SystemExit(main())
