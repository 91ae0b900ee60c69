"""What sets how a run behaves beyond its flags: the project config and the output level."""
