//! The log of the launcher and the session agent: to stderr (stdout is a
//! protocol in both), filtered by an environment variable.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Logs to stderr at the level the variable `var` asks (a level, `debug`,
/// or `target=level` directives separated by commas), `default` when it is
/// unset or empty; a value it cannot read is said in one warning line and
/// `default` holds. `ansi`: colours, for a terminal.
pub fn init(var: &str, default: &str, ansi: bool) {
    let asked = std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    let parsed = asked.as_deref().map(str::parse::<Targets>);
    let filter = match &parsed {
        Some(Ok(filter)) => filter.clone(),
        _ => default.parse::<Targets>().unwrap_or_default(),
    };
    // The builder's own cap is `info`: the filter decides, not it.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .finish()
        .with(filter)
        .init();
    if let (Some(value), Some(Err(e))) = (asked, parsed) {
        tracing::warn!(
            "{var}={value:?} is not a log level or `target=level` list ({e}); logging at {default}"
        );
    }
}
