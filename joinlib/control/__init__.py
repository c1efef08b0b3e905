"""Control messages on the control topic: what a plan, status, done or stop message may say, checked
before anyone acts on it."""
