"""Stream data: data files, synthetic generators and measured statistics."""
