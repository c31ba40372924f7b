//! `GET /metrics` in the Prometheus text format, on `metrics_listen` only. Hand-rolled on
//! the daemon's runtime: one request per connection, read with a deadline and a size cap,
//! so that a slow or hostile client costs one task and a few KiB at most.

use crate::server::Ctx;
use crate::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

const MAX_REQUEST: usize = 8 * 1024;
const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Scrapers served at once; more wait for the next accept.
const MAX_CLIENTS: usize = 8;

/// Binds now, so that a bad or busy address stops the start with a clear error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::MetricsListen { addr, source })
}

pub fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    let mut stop = ctx.stop.subscribe();
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|stop| *stop) => break,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let _ = answer(stream, &ctx).await;
                drop(permit);
            });
        }
    });
}

async fn answer(mut stream: TcpStream, ctx: &Ctx) -> std::io::Result<()> {
    let Ok(Some(line)) = tokio::time::timeout(READ_DEADLINE, request_line(&mut stream)).await
    else {
        return respond(
            &mut stream,
            "400 Bad Request",
            "a request line was expected\n",
        )
        .await;
    };
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = super::exposition(&super::gather(ctx).await);
            respond(&mut stream, "200 OK", &body).await
        }
        ("GET", _) => respond(&mut stream, "404 Not Found", "only /metrics is served\n").await,
        _ => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "only GET is served\n",
            )
            .await
        }
    }
}

/// Reads until the end of the headers (which are ignored) and returns the first line.
async fn request_line(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_REQUEST {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    text.lines().next().map(str::to_string)
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
