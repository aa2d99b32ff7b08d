//! The driver's connections (federation, xRFC TP1 authorities; TP2's per-authority parameters):
//! the default's and one per authority with servers or parameters of its own, what each
//! connects to and presents ([`plan`]), and which one a name is subscribed on ([`Routes`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Command, Options};
use crate::constraints::Params;
use crate::machine::Config;
use crate::types;

/// One connection to start: its authority (`None`: the default's), its options and its
/// machine's configuration.
pub(super) struct Planned {
    pub(super) authority: Option<String>,
    pub(super) options: Options,
    pub(super) config: Config,
}

/// The connections `options` call for, the default's first: one per authority with servers
/// ([`Options::authorities`]) or parameters ([`Options::authority_params`]) of its own, with
/// its servers and its node presenting its parameters.
pub(super) fn plan(options: &Options, config: &Config) -> Vec<Planned> {
    let mut planned = vec![Planned {
        authority: None,
        options: options.clone(),
        config: config.clone(),
    }];
    for authority in own_connections(options) {
        let mut config = config.clone();
        if let Some(params) = options.authority_params.get(authority) {
            present(&mut config, params);
        }
        planned.push(Planned {
            authority: Some(authority.to_owned()),
            options: for_authority(options, authority),
            config,
        });
    }
    planned
}

/// The options of one authority's connection: `options`, with its servers (the default's when
/// it has none of its own).
fn for_authority(options: &Options, authority: &str) -> Options {
    let mut own = options.clone();
    if let Some(servers) = options.authorities.get(authority).filter(|s| !s.is_empty()) {
        own.server = servers[0].clone();
        own.fallback_servers = servers[1..].to_vec();
    }
    own.authorities.clear();
    own.authority_params.clear();
    own
}

/// The authorities with a connection of their own: those with servers or parameters.
fn own_connections(options: &Options) -> BTreeSet<&str> {
    options
        .authorities
        .iter()
        .filter(|(_, servers)| !servers.is_empty())
        .map(|(a, _)| a.as_str())
        .chain(options.authority_params.keys().map(String::as_str))
        .collect()
}

/// `config`'s node presenting the TP2 dynamic parameters `params` (an authority's,
/// [`Options::authority_params`]) for every type the client knows (LEDS's `LbEndpoint` too) and
/// every type the node names.
fn present(config: &mut Config, params: &Params) {
    let context = envoy_types::pb::xds::core::v3::ContextParams {
        params: params.clone().into_iter().collect(),
    };
    let known = types::ALIASES
        .iter()
        .map(|(_, type_url)| *type_url)
        .chain([types::LB_ENDPOINT]);
    let named: Vec<String> = config.node.dynamic_parameters.keys().cloned().collect();
    for type_url in known.map(str::to_owned).chain(named) {
        config
            .node
            .dynamic_parameters
            .insert(type_url, context.clone());
    }
}

/// The running connections' commands: which one a name goes to
/// ([`Options::authority_for`]).
#[derive(Clone)]
pub(super) struct Routes {
    default: mpsc::UnboundedSender<Command>,
    /// The options started with.
    options: Arc<Options>,
    /// The connections of the authorities with servers or parameters of their own.
    authorities: Arc<BTreeMap<String, mpsc::UnboundedSender<Command>>>,
}

impl Routes {
    pub(super) fn new(
        options: Options,
        default: mpsc::UnboundedSender<Command>,
        authorities: BTreeMap<String, mpsc::UnboundedSender<Command>>,
    ) -> Routes {
        Routes {
            default,
            options: Arc::new(options),
            authorities: Arc::new(authorities),
        }
    }

    /// The default connection's commands.
    pub(super) fn default(&self) -> &mpsc::UnboundedSender<Command> {
        &self.default
    }

    /// The connection that serves `name`: its authority's, or the default.
    pub(super) fn route(&self, name: &str) -> &mpsc::UnboundedSender<Command> {
        self.options
            .authority_for(name)
            .and_then(|a| self.authorities.get(a))
            .unwrap_or(&self.default)
    }
}
