//! The `net` factor's real kernel bottleneck: two network namespaces joined
//! by a veth pair, `tbf` on the sending side(s), UDP cross traffic from a
//! built-in sender, and two forwarders that carry the proxy's upstream leg
//! across the pair:
//!
//! ```text
//! proxy ─► 127.0.0.1:entry ══ ns a ══ veth (tbf) ══ ns b: 10.213.0.2:port ══► server
//! ```
//!
//! A socket belongs to the namespace its creating thread was in, so the
//! forwarders create their sockets from threads that entered a namespace with
//! `setns(2)` and use them from anywhere. The namespaces carry this process's
//! id (`stagetrace-<pid>-<n>-a`); everything lives inside them, so deleting
//! them removes the veth pair and its qdiscs too. Leftovers of a process that
//! died without cleaning up are removed at the next start.

mod cross;
mod forwarder;
mod namespaces;
mod path;

pub use namespaces::{kernel_bottleneck_available, namespaces_of, remove_stale, stale_namespaces};
pub use path::KernelPath;
