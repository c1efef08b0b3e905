"""Deployable services: thin wiring of joinlib and its adapters (docs/contracts.md, "Services")."""
