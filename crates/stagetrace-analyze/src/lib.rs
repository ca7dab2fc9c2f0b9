//! Offline analysis of stagetrace records.
