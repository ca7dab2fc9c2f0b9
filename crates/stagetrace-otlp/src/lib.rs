//! OTLP export of stagetrace call records.
