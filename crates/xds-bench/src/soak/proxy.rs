//! A TCP proxy between a relay and its upstream replica: the link the soak cuts and restores.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy: connections to `addr` are forwarded to the target until [`Proxy::cut`].
pub struct Proxy {
    pub addr: String,
    state: Arc<State>,
}

struct State {
    target: String,
    cut: AtomicBool,
    /// Bumped by every cut: each forwarded connection ends when it changes.
    cuts: watch::Sender<u64>,
}

impl Proxy {
    /// Listens on 127.0.0.1 (a port from the OS) and forwards to `target`.
    pub async fn start(target: &str) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let state = Arc::new(State {
            target: target.to_owned(),
            cut: AtomicBool::new(false),
            cuts: watch::channel(0).0,
        });
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if s.cut.load(Ordering::SeqCst) {
                    // The link is down: the connection is refused as soon as it is made.
                    drop(inbound);
                    continue;
                }
                let s = s.clone();
                tokio::spawn(async move {
                    let mut cuts = s.cuts.subscribe();
                    let Ok(mut outbound) = TcpStream::connect(&s.target).await else {
                        return;
                    };
                    let mut inbound = inbound;
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Ok(Proxy { addr, state })
    }

    /// Cuts the link: every forwarded connection is closed, new ones are refused.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        self.state.cuts.send_modify(|n| *n += 1);
    }

    /// Restores the link.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}
