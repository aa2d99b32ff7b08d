//! Follows one type of an xDS server and prints each event: the driver as an embedder uses it.
//!
//! `cargo run -p xdsd-client --example watch -- 127.0.0.1:18000 cluster [NAME...] [--delta]`

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::{types, Config, Event, Flavor, Options, XdsClient};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let delta = args.iter().any(|a| a == "--delta");
    args.retain(|a| a != "--delta");
    let (server, kind, names) = match args.as_slice() {
        [server, kind, names @ ..] => (server.clone(), kind.clone(), names.to_vec()),
        _ => return Err("usage: watch SERVER TYPE [NAME...] [--delta]".into()),
    };
    let type_url = types::resolve(&kind).ok_or(format!("unknown type {kind:?}"))?;
    let mut config = Config::new(Node {
        id: "xdsd-client-example".into(),
        ..Default::default()
    });
    if delta {
        config.flavor = Flavor::Delta;
    }
    let (client, mut events) = XdsClient::start(Options::new(server), config, None)?;
    let names = if names.is_empty() {
        vec![xdsd_client::WILDCARD.to_owned()]
    } else {
        names
    };
    client.subscribe(&type_url, names);
    while let Some(event) = events.next().await {
        match event {
            Event::Update(u) => {
                for r in &u.added {
                    println!("added {} (version {})", r.name, r.version);
                }
                for r in &u.changed {
                    println!("changed {} (version {})", r.name, r.version);
                }
            }
            other => println!("{other:?}"),
        }
    }
    Ok(())
}
