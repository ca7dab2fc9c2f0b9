//! What kind of figure a row is: its unit, group and side.

use std::fmt;

/// The unit a figure is written in (the suffix of its JSON name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Milliseconds with microsecond resolution (`*_ms`).
    Millis,
    /// Microseconds with nanosecond resolution (`*_us`).
    Micros,
}

impl Unit {
    /// The JSON name's suffix: `"_ms"` or `"_us"`.
    pub const fn suffix(self) -> &'static str {
        match self {
            Unit::Millis => "_ms",
            Unit::Micros => "_us",
        }
    }

    /// Nanoseconds in one unit.
    pub const fn ns(self) -> i64 {
        match self {
            Unit::Millis => 1_000_000,
            Unit::Micros => 1_000,
        }
    }
}

/// What kind of figure a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// A stage measured on the client (`capture`, `dispatch`).
    ClientStage,
    /// A stage that crosses the wire (`uplink`, `downlink`): its split needs
    /// the clock offset between the machines.
    LinkStage,
    /// A stage measured on the server (`queue`, `infer`).
    ServerStage,
    /// Derived from stages or spans (`roundtrip`, `server`, `net`, `e2e`, `gap`).
    Derived,
    /// What the uplink/downlink split rests on (`offset`, `split_err`).
    Clock,
    /// Figures about the call rather than a part of it: the observer's own
    /// cost and the lateness against the scheduled tick.
    Bookkeeping,
    /// What a host did to the call while it ran (run-queue wait, CPU
    /// stall, GC): time that overlaps the stages, on the robot
    /// ([`Side::Client`]) or the policy server ([`Side::Server`]).
    Host,
}

impl Group {
    /// One of the six canonical stages of a call.
    pub const fn is_stage(self) -> bool {
        matches!(
            self,
            Group::ClientStage | Group::LinkStage | Group::ServerStage
        )
    }
}

/// Which part of the system a figure belongs to, as reports group them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The robot client (`capture`, `dispatch`).
    Client,
    /// The wire between client and server.
    Transport,
    /// The policy server.
    Server,
    /// The whole call (`e2e`, `gap`, observer, lateness, clock).
    Call,
}

impl Side {
    /// `"client"`, `"transport"`, `"server"` or `"call"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Transport => "transport",
            Side::Server => "server",
            Side::Call => "call",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
