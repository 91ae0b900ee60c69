"""The edges to the outside: the docker engine, AWS (ECR) and OCI registries over HTTP. Only these modules
import docker, boto3 or botocore for the pipeline; the rest of imagebuild gets clients from here and stays
testable as data."""
