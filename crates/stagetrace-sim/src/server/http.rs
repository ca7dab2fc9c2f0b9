//! The HTTP face of the simulated server: `POST /infer` with a msgpack body,
//! an axum router behind `stagetrace-net`'s timing layer.

use std::net::SocketAddr;

use axum::extract::Extension;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use stagetrace_net::tower::TimingLayer;
use stagetrace_net::{msg::MsgMap, ws::Handler, InferTimer, RequestHook, ServerClock};

use super::chain::{AdmissionPart, DynHandler, Parts};
use crate::SimError;

/// A running HTTP server: its address, and how to stop it.
#[derive(Debug)]
pub(crate) struct HttpServer {
    pub(crate) addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// Stop accepting, let requests in flight finish, wait for the task.
    pub(crate) async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// What the HTTP server is built from.
pub(crate) struct HttpSetup<'a> {
    pub(crate) addr: SocketAddr,
    pub(crate) handler: DynHandler,
    pub(crate) parts: &'a Parts,
    pub(crate) clock: ServerClock,
    pub(crate) hook: RequestHook,
    /// Concurrency limit of the timing layer (`None`: none).
    pub(crate) concurrency: Option<usize>,
    pub(crate) max_body_bytes: Option<usize>,
    /// Send the timing headers (`false`: an unmodified server).
    pub(crate) report_timing: bool,
}

/// Bind and serve on the current runtime.
pub(crate) async fn spawn(setup: HttpSetup<'_>) -> Result<HttpServer, SimError> {
    let handler = setup.handler;
    let mut app = axum::Router::new().route(
        "/infer",
        axum::routing::post(
            move |Extension(timer): Extension<InferTimer>, body: axum::body::Bytes| {
                let handler = handler.clone();
                async move {
                    let obs = match MsgMap::from_msgpack(&body) {
                        Ok(o) => o,
                        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
                    };
                    match handler.call(obs, timer).await {
                        Ok(action) => (
                            [(header::CONTENT_TYPE, "application/msgpack")],
                            action.to_msgpack(),
                        )
                            .into_response(),
                        Err(e) => {
                            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
                        }
                    }
                }
            },
        ),
    );
    if let Some(AdmissionPart::Http(layer)) = &setup.parts.admission {
        app = app.layer(layer.clone());
    }
    let hook = setup.hook;
    let mut timing = TimingLayer::new()
        .clock(setup.clock)
        .report_timing(setup.report_timing)
        .on_request(move |rec| hook(rec));
    if let Some(n) = setup.concurrency {
        timing = timing.max_concurrency(n);
    }
    if let Some(n) = setup.max_body_bytes {
        timing = timing.max_body_bytes(n);
    }
    let app = app.layer(timing);
    let listener = tokio::net::TcpListener::bind(setup.addr)
        .await
        .map_err(|source| SimError::Bind {
            addr: setup.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SimError::Bind {
        addr: setup.addr,
        source,
    })?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(HttpServer { addr, stop, task })
}
