"""MJoin trees: derived streams, which trees to run, trees placed on nodes, and operators shared between queries."""
