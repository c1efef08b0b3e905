"""The planner service: accepts queries, plans them, publishes the plan on ``control``."""
