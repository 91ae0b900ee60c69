"""Stage 6, pre-flight: a released image in, the launch on a cluster out.

`recipes` prints the mpirun / sbatch / MPIJob launch of the validators for a variant's lock; `sagemaker`
starts the pre-flight as a SageMaker training job; `metrics` are the metric definitions SageMaker reads from
the validator's log lines.
"""
