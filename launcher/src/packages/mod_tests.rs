//! The composer's memory: what it remembers of a failure, and for how long,
//! with a compose helper of a few lines that counts its starts.

use std::num::NonZeroU64;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use super::*;
use crate::catalog::names::Allow;
use crate::testing;

/// A composer caching in `dir`, and a policy whose helper appends a line
/// to `dir/starts` and fails (exit 70) each time it runs.
fn failing(dir: &Path) -> (Composer, OnDemand) {
    let helper = dir.join("helper");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\necho start >>{}\necho 'it broke' >&2\nexit 70\n",
            dir.join("starts").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let xdg = dir.join("xdg");
    let composer = Composer::new(Settings {
        cache: Cache::new(
            |name| (name == "XDG_CACHE_HOME").then(|| xdg.clone().into_os_string()),
            4,
        ),
        max_compositions: 1,
        allow_outside_store: true,
    });
    let policy = OnDemand {
        compose: vec![helper.display().to_string()],
        allow: Allow::Any,
        timeout_s: NonZeroU64::new(30).unwrap(),
    };
    (composer, policy)
}

fn starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn the_cache_entry_is_named_by_fnv1a_of_the_store_path_and_names() {
    // checks/e2e/packages.py computes the same name to plant an entry.
    let key = (
        "python".to_owned(),
        "/nix/store/x-a".to_owned(),
        vec!["jq".to_owned(), "python3Packages.numpy".to_owned()],
    );
    assert_eq!(stem(&key), "python-40c2bfead29d9420");
}

#[tokio::test]
async fn a_failure_is_remembered_for_a_minute_then_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let (composer, policy) = failing(dir.path());
    let base = Arc::new(testing::env("python").build());
    let names = vec!["jq".to_owned()];
    let first = composer.compose(&base, &policy, &names, || {}).await.err();
    assert_eq!(first, Some(ComposeError::Failed("it broke".into())));
    let again = composer.compose(&base, &policy, &names, || {}).await.err();
    assert_eq!(again, first, "the same failure, remembered");
    assert_eq!(
        starts(dir.path()),
        1,
        "the helper ran again within a minute"
    );

    // Another set is not held to this one's failure.
    let other = vec!["ripgrep".to_owned()];
    let _ = composer.compose(&base, &policy, &other, || {}).await;
    assert_eq!(starts(dir.path()), 2);

    // The failure as if it were a minute old: forgotten, tried again.
    let key: Key = (base.name.clone(), base.store_path.clone(), names.clone());
    let old = Instant::now()
        .checked_sub(FAILURE_MEMORY)
        .expect("the clock is past a minute");
    let cell = Arc::new(OnceCell::new());
    cell.set(Outcome::Failed(ComposeError::Failed("old".into()), old))
        .unwrap();
    composer.lock().insert(key, cell);
    let _ = composer.compose(&base, &policy, &names, || {}).await;
    assert_eq!(
        starts(dir.path()),
        3,
        "a failure past a minute was still remembered"
    );
}

#[tokio::test]
async fn a_call_that_waited_for_a_slot_in_vain_is_not_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let (composer, mut policy) = failing(dir.path());
    policy.timeout_s = NonZeroU64::new(1).unwrap();
    let base = Arc::new(testing::env("python").build());
    let names = vec!["jq".to_owned()];
    let held = Arc::clone(&composer.slots).acquire_owned().await.unwrap();
    let busy = composer.compose(&base, &policy, &names, || {}).await.err();
    assert_eq!(busy, Some(ComposeError::Busy(1)));
    assert_eq!(starts(dir.path()), 0);
    drop(held);
    let _ = composer.compose(&base, &policy, &names, || {}).await;
    assert_eq!(
        starts(dir.path()),
        1,
        "a set refused for a busy server was remembered"
    );
}

#[test]
fn a_busy_server_and_a_name_outside_its_scope_are_told_in_one_line() {
    use crate::report::refusal::Refusal;
    let busy = Refusal::compose_failed("python", &ComposeError::Busy(1)).to_string();
    assert!(
        busy.starts_with("error[server_busy]: ")
            && busy.contains("(1 at once, --max-compositions / NIX_SANDBOX_MAX_COMPOSITIONS)"),
        "{busy}"
    );
    let line =
        "python3Packages.stdenv is the build environment its scope carries, not a package of it";
    let outside =
        Refusal::compose_failed("python", &ComposeError::OutsideScope(line.into())).to_string();
    assert!(
        outside.starts_with(&format!("error[packages_not_allowed]: {line}: not allowed"))
            && outside.contains("add the name itself to packagesOnDemand.allow"),
        "{outside}"
    );
    for text in [busy, outside] {
        assert!(!text.contains('\n'), "{text}");
    }
}
