"""Models, validation, the job state machine and scaling maths: pure, no I/O."""
