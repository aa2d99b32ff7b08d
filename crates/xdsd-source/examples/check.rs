//! Validates a resource directory the way xdsd would load it, without serving it:
//! `cargo run -p xdsd-source --example check -- DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: check DIR");
        return ExitCode::from(2);
    };
    let loaded = xdsd_source::Descriptors::envoy()
        .and_then(|descriptors| xdsd_source::load_directory(&descriptors, &dir));
    match loaded {
        Ok(resources) => {
            for r in &resources {
                println!(
                    "{}  {}  ({} bytes) from {}",
                    r.type_url,
                    r.name,
                    r.value.len(),
                    r.origin
                );
            }
            println!("{} resources", resources.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
