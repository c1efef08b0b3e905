"""Join plans: logical plans (Definition 1) and the plan IR that says what runs where."""
