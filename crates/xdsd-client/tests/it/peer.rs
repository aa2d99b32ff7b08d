//! The client against rust-control-plane 0.1.2 (bench-peer/, its own workspace, needing protoc),
//! over SotW ADS.
