"""Messages between processes: node messages, their Avro wire encoding, payload values, Bloom filters
and the validation of control messages."""
