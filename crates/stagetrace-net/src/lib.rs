//! stagetrace transport integrations.
