//! An in-process xdsd on 127.0.0.1 (port chosen by the OS) and a tonic channel to it.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use tonic::transport::Channel;
use xdsd_core::store::{Change, ResourceInput, Store};
use xdsd_core::transport::grpc::XdsServer;
use xdsd_core::transport::{StreamCounters, StreamStatus};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Server {
    pub store: Store,
    pub channel: Channel,
    streams: Box<dyn Fn() -> (Vec<StreamStatus>, StreamCounters) + Send + Sync>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start() -> Server {
        let store = Store::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = XdsServer::new(store.clone());
        let stats = server.stats_handle();
        let task = tokio::spawn(async move {
            server
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Server {
            store,
            channel,
            streams: Box::new(move || (stats.streams(), stats.totals())),
            stop: Some(stop),
            task,
        }
    }

    pub fn set(&self, type_url: &str, name: &str, content: &[u8]) {
        self.store
            .apply([Change::Set(input(type_url, name, content))])
            .unwrap();
    }

    pub fn streams(&self) -> Vec<StreamStatus> {
        (self.streams)().0
    }

    pub fn totals(&self) -> StreamCounters {
        (self.streams)().1
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

pub fn input(type_url: &str, name: &str, content: &[u8]) -> ResourceInput {
    ResourceInput::new(type_url, name, Bytes::copy_from_slice(content))
}
