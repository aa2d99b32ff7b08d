//! The relay's source against an in-process xdsd upstream on 127.0.0.1 (the xDS client's test
//! server): the upstream gone and back, a resource the relay cannot decode; a name the upstream
//! answers late, answered downstream once and never told missing; TP2 resource locators
//! subscribed upstream as its plain name on the stream of its parameters; a legacy upstream that
//! varies a name's body by node, each group served its own, and a group store's refused change
//! reported; a wildcard client never sent the upstream's answer to names asked before the
//! wildcard.

mod legacy;
mod locators;
mod pending;
mod upstream;
mod wildcard;
