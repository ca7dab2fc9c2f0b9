//! The tower layers and what their services carry: [`ServerLayer`] around a
//! tonic server's services ([`ServerService`], whose request body is an
//! [`Arrival`] and whose response body a [`WithTrailer`]) and
//! [`ClientLayer`] on a client's `Channel` ([`ClientService`], whose
//! response body is a [`ReadTrailers`]).

pub use crate::client::{ClientLayer, ClientService, ReadTrailers, TrailerReader};
pub use crate::server::{
    AddTrailer, AddTrailers, Arrival, ArrivalStamps, ServerLayer, ServerService, WithTrailer,
};
