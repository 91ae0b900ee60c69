"""Beside the parse path, run: a launch in, a run report out.

`runner` starts the launcher and streams its ranks' output into the parser, `watchdog` and `reaper` end a
hung or leftover process group, `launchers` knows how each launcher tags lines, `launchcheck` compares the
launch with its log, `pairwise` finds a bad node by elimination, `sagemaker_env` reads SageMaker's
environment, `sm_mpi` runs one mpirun across a SageMaker job's instances, and `report` folds how the
run ended into the parser's verdict.
"""
