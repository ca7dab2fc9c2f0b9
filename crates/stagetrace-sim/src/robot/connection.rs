//! The robot's connection to the policy server.

use std::net::SocketAddr;
use std::time::Duration;

use stagetrace_net::{http::TracedHttpClient, msg::MsgMap, ws::ClientOptions, ws::PolicyClient};
use stagetrace_wire::Hops;

use crate::{SimError, Transport};

/// The robot's connection to the policy server; each call runs in a
/// `transport` span (the clients of `stagetrace-net` open it).
#[derive(Debug)]
pub enum Connection {
    /// A WebSocket client, reconnected before a call if the connection dropped.
    Ws(Box<PolicyClient>),
    /// A traced HTTP client and the URL it posts to.
    Http(TracedHttpClient, String),
}

fn call_err(e: impl std::fmt::Display) -> SimError {
    SimError::Call(e.to_string())
}

impl Connection {
    /// Connect to the server at `addr` (WebSocket) or prepare the client
    /// (HTTP); every call gives up after `call_timeout`.
    pub async fn connect(
        transport: Transport,
        addr: SocketAddr,
        call_timeout: Duration,
    ) -> Result<Connection, SimError> {
        let unreachable = |e: &dyn std::fmt::Display| SimError::Connect {
            addr,
            reason: e.to_string(),
        };
        match transport {
            Transport::Ws => {
                let options = ClientOptions {
                    call_timeout,
                    ..ClientOptions::default()
                };
                PolicyClient::connect_with(&format!("ws://{addr}"), options)
                    .await
                    .map(|c| Connection::Ws(Box::new(c)))
                    .map_err(|e| unreachable(&e))
            }
            Transport::Http => TracedHttpClient::new()
                .map(|c| Connection::Http(c.timeout(call_timeout), format!("http://{addr}/infer")))
                .map_err(|e| unreachable(&e)),
        }
    }

    /// One policy call: the observation out, the action map back.
    pub async fn infer(&mut self, obs: &MsgMap) -> Result<MsgMap, SimError> {
        self.infer_via(obs).await.map(|(action, _)| action)
    }

    /// One policy call, with the relays (gateways) the answer came through
    /// and their own timing (empty for a direct call or over HTTP).
    pub async fn infer_via(&mut self, obs: &MsgMap) -> Result<(MsgMap, Hops), SimError> {
        match self {
            Connection::Ws(client) => {
                if !client.is_connected() {
                    client.reconnect().await.map_err(call_err)?;
                }
                client
                    .infer(obs)
                    .await
                    .map(|r| (r.action, r.hops))
                    .map_err(call_err)
            }
            Connection::Http(client, url) => {
                let req = client
                    .inner()
                    .post(url.as_str())
                    .header("content-type", "application/msgpack")
                    .body(obs.to_msgpack());
                let reply = client.send(req).await.map_err(call_err)?;
                MsgMap::from_msgpack(&reply.body)
                    .map(|a| (a, Hops::new()))
                    .map_err(call_err)
            }
        }
    }

    /// Close the connection (WebSocket: a close handshake).
    pub async fn close(self) {
        if let Connection::Ws(client) = self {
            client.close().await;
        }
    }
}
