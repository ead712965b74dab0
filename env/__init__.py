"""The OpenEnv data-workflow environment: the shell server and its procedural task families."""
