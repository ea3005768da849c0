//! Tests of the configuration: flags and variables as they are read, the
//! help and docs/configuration.md's table rendered from the declarations,
//! and the declarations held to the Nix module's defaults.

use super::*;

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// An environment holding `vars` only.
fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
    let vars: Vec<(String, OsString)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn no_env() -> impl Fn(&str) -> Option<OsString> {
    env(&[])
}

#[test]
fn defaults() {
    let o = parse(args(&[]), no_env()).unwrap();
    assert_eq!(o.mode, Mode::Stdio);
    assert!(o.manifests.is_empty());
    assert!(!o.allow_outside_store);
    assert_eq!(o.max_code_bytes, 1_048_576);
}

#[test]
fn env_manifests_come_before_flags() {
    let o = parse(
        args(&["--manifest", "/c.json", "--manifest=/d.json", "--check"]),
        env(&[("NIX_SANDBOX_MANIFEST", "/a.json::/b.json")]),
    )
    .unwrap();
    assert_eq!(o.mode, Mode::Check);
    let want: Vec<PathBuf> = ["/a.json", "/b.json", "/c.json", "/d.json"]
        .iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(o.manifests, want);
}

#[test]
fn bad_flags_are_one_line_errors() {
    for bad in [
        &["--nope"][..],
        &["--manifest"],
        &["--max-code-bytes", "x"],
        &["extra"],
    ] {
        let e = parse(args(bad), no_env()).unwrap_err();
        assert!(!e.is_empty() && !e.contains('\n'), "{bad:?}: {e}");
    }
}

#[test]
fn http_flags() {
    let o = parse(
        args(&[
            "--http",
            "127.0.0.1:0",
            "--token-file",
            "/run/t",
            "--allow-origin",
            "https://a.example",
        ]),
        no_env(),
    )
    .unwrap();
    assert_eq!(o.mode, Mode::Http);
    assert_eq!(o.http_addr.as_deref(), Some("127.0.0.1:0"));
    assert_eq!(o.token_file, Some(PathBuf::from("/run/t")));
    assert_eq!(o.allowed_origins, ["https://a.example"]);
    for bad in [
        &["--http", "127.0.0.1:0", "--stdio"][..],
        &["--token-file", "/run/t"],
        &["--allow-origin", "https://a.example"],
        &["--http"],
    ] {
        let e = parse(args(bad), no_env()).unwrap_err();
        assert!(!e.is_empty() && !e.contains('\n'), "{bad:?}: {e}");
    }
}

#[test]
fn session_flags() {
    let o = parse(
        args(&[
            "--max-sessions",
            "3",
            "--session-idle-timeout=5",
            "--session-max-lifetime",
            "60",
        ]),
        no_env(),
    )
    .unwrap();
    assert_eq!(
        (
            o.sessions.max_sessions,
            o.sessions.idle_timeout,
            o.sessions.max_lifetime
        ),
        (3, Duration::from_secs(5), Duration::from_secs(60))
    );
    for bad in [
        &["--max-sessions", "0"][..],
        &["--session-idle-timeout", "x"],
    ] {
        let e = parse(args(bad), no_env()).unwrap_err();
        assert!(e.contains(bad[0]) && !e.contains('\n'), "{bad:?}: {e}");
    }
}

#[test]
fn help_says_the_store_flag_is_for_tests() {
    assert!(help().contains("FOR TESTS ONLY"));
    assert_eq!(parse(args(&["--help"]), no_env()).unwrap().mode, Mode::Help);
}

#[test]
fn settings_come_from_defaults_env_and_flags() {
    let settings =
        |vars: &[(&str, &str)], flags: &[&str]| parse(args(flags), env(vars)).map(|o| o.sessions);
    assert_eq!(settings(&[], &[]).unwrap(), session::Settings::default());
    let vars = [
        (MAX_SESSIONS.var_name(), "4"),
        (SESSION_IDLE_TIMEOUT.var_name(), "10"),
    ];
    let s = settings(&vars, &["--session-max-lifetime", "20"]).unwrap();
    assert_eq!(s.max_sessions, 4);
    assert_eq!(s.idle_timeout, Duration::from_secs(10));
    assert_eq!(s.max_lifetime, Duration::from_secs(20));
    let s = settings(&vars, &["--max-sessions", "2"]).unwrap();
    assert_eq!(s.max_sessions, 2);
    let bad = |_: &str| Some(OsString::from("soon"));
    let e = parse(args(&[]), bad).unwrap_err();
    assert!(e.starts_with(MAX_SESSIONS.var_name()), "{e}");
    assert!(settings(&[], &["--max-sessions", "0"]).is_err());
}

#[test]
fn server_wide_bounds_come_from_defaults_env_and_flags() {
    let bounds = |vars: &[(&str, &str)], flags: &[&str]| parse(args(flags), env(vars));
    let o = bounds(&[], &[]).unwrap();
    assert_eq!(o.bounds, Bounds::default());
    assert_eq!(
        (
            o.bounds.max_runs,
            o.sessions.max_total,
            o.bounds.max_connections
        ),
        (8, 32, 128)
    );
    assert_eq!(o.bounds.output_call_bytes, 64 << 20);
    let o = bounds(
        &[
            ("NIX_SANDBOX_MAX_RUNS", "3"),
            ("NIX_SANDBOX_REQUEST_READ_TIMEOUT", "4"),
            ("NIX_SANDBOX_OUTPUT_MAX_MB", "2"),
        ],
        &[
            "--max-runs",
            "5",
            "--max-mcp-sessions=6",
            "--max-unread-bytes",
            "7",
        ],
    )
    .unwrap();
    assert_eq!(o.bounds.max_runs, 5, "the flag wins");
    assert_eq!(o.bounds.read_timeout, Duration::from_secs(4));
    assert_eq!(o.bounds.output_max_bytes, 2 << 20);
    assert_eq!(
        (o.bounds.max_mcp_sessions, o.bounds.max_unread_bytes),
        (6, 7)
    );
    // Shares: a flag or a variable, positive.
    assert_eq!(
        (o.bounds.client_runs_share, o.bounds.client_sessions_share),
        (4, 16)
    );
    let o = bounds(
        &[("NIX_SANDBOX_CLIENT_SESSIONS_SHARE", "3")],
        &["--client-runs-share", "2"],
    )
    .unwrap();
    assert_eq!(
        (o.bounds.client_runs_share, o.bounds.client_sessions_share),
        (2, 3)
    );
    assert!(bounds(&[], &["--client-runs-share", "0"]).is_err());
    // Checkpoints: 0 (the default) keeps none; a number, not a word.
    let o = bounds(&[("NIX_SANDBOX_MAX_CHECKPOINTS", "0")], &[]).unwrap();
    assert_eq!(o.sessions.max_checkpoints, 0);
    let o = bounds(&[], &["--max-checkpoints", "3"]).unwrap();
    assert_eq!(o.sessions.max_checkpoints, 3);
    let e = bounds(&[("NIX_SANDBOX_MAX_CHECKPOINTS", "x")], &[]).unwrap_err();
    assert!(e.contains("0 keeps none"), "{e}");
    // A client's own cap is never over all clients' together.
    let o = bounds(&[], &["--max-sessions-total", "4"]).unwrap();
    assert_eq!((o.sessions.max_sessions, o.sessions.max_total), (4, 4));
    for bad in [&["--max-runs", "0"][..], &["--max-connections", "x"]] {
        let e = bounds(&[], bad).unwrap_err();
        assert!(e.contains(bad[0]) && !e.contains('\n'), "{bad:?}: {e}");
    }
    let e = bounds(&[("NIX_SANDBOX_MAX_CONNECTIONS", "-1")], &[]).unwrap_err();
    assert!(e.starts_with("NIX_SANDBOX_MAX_CONNECTIONS"), "{e}");
}

#[test]
fn the_outputs_mirror_is_off_unless_set() {
    let dir = |vars: &[(&str, &str)]| parse(args(&[]), env(vars)).unwrap().output_dir;
    assert_eq!(dir(&[]), None);
    assert_eq!(dir(&[("NIX_SANDBOX_OUTPUT_DIR", "")]), None);
    assert_eq!(
        dir(&[("NIX_SANDBOX_OUTPUT_DIR", "/srv/out")]),
        Some(PathBuf::from("/srv/out"))
    );
}

#[test]
fn the_project_is_mounted_where_the_variables_say() {
    let mount = |vars: &[(&str, &str)]| parse(args(&[]), env(vars)).unwrap().project_mount;
    assert_eq!(mount(&[("PROJECT_MOUNT", "/src")]), None);
    assert_eq!(
        mount(&[("PROJECT_DIR", "/home/me/p")]).as_deref(),
        Some("/project")
    );
    assert_eq!(
        mount(&[("PROJECT_DIR", "/home/me/p"), ("PROJECT_MOUNT", "/src")]).as_deref(),
        Some("/src")
    );
}

#[test]
fn the_token_file_variable_serves_http_only() {
    let http = ["--http", "127.0.0.1:0"];
    let vars = [("NIX_SANDBOX_TOKEN_FILE", "/run/t")];
    let token = |flags: &[&str]| parse(args(flags), env(&vars)).unwrap().token_file;
    assert_eq!(token(&http), Some(PathBuf::from("/run/t")));
    assert_eq!(
        token(&["--http", "127.0.0.1:0", "--token-file", "/run/u"]),
        Some(PathBuf::from("/run/u"))
    );
    assert_eq!(token(&[]), None);
}

/// Every flag, variable and default declared is in `--help`, and no line is
/// wider than the help's width.
#[test]
fn help_shows_every_setting() {
    let help = help();
    for setting in SETTINGS {
        for name in names(setting) {
            assert!(help.contains(&name), "{name} is not in --help:\n{help}");
        }
        if let Some(default) = default_text(setting) {
            assert!(
                help.contains(&format!("default {default}")),
                "{default} is not in --help:\n{help}"
            );
        }
    }
    for line in help.lines() {
        assert!(line.len() <= HELP_WIDTH, "{line:?}");
    }
}

/// The names a setting goes by: `--flag`, `VAR`.
fn names(setting: &Setting) -> Vec<String> {
    let flag = setting.flag.map(|f| format!("--{f}"));
    let var = setting.var.map(|(v, _)| v.to_owned());
    flag.into_iter().chain(var).collect()
}

fn default_text(setting: &Setting) -> Option<String> {
    setting.default.map(|d| match d {
        Default::Number(n) => n.to_string(),
        Default::Text(t) => t.to_owned(),
    })
}

/// docs/configuration.md's table is the one [`markdown`] renders from the
/// declarations. `UPDATE_DOCS=1 cargo test -p launcher config_doc` rewrites
/// it; the prose around the markers is the page's own.
#[test]
fn config_doc_is_rendered_from_the_declarations() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let page = std::fs::read_to_string(path).expect("docs/configuration.md is next to launcher/");
    let (head, rest) = page
        .split_once(DOC_BEGIN)
        .expect("docs/configuration.md holds the line DOC_BEGIN");
    let (_, tail) = rest
        .split_once(DOC_END)
        .expect("docs/configuration.md holds the line DOC_END after DOC_BEGIN");
    let want = format!("{head}{DOC_BEGIN}\n\n{}\n{DOC_END}{tail}", markdown());
    if page == want {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, want).expect("docs/configuration.md is writable");
        eprintln!("rewrote the table of {path}");
        return;
    }
    panic!(
        "docs/configuration.md's table is not launcher/src/settings.rs's declarations: \
         regenerate it with `UPDATE_DOCS=1 cargo test -p launcher config_doc`"
    );
}

/// `PROJECT_MOUNT`'s help names every path the project may not be mounted
/// on, in or above, as the start-up check refuses them.
#[test]
fn project_mount_help_names_the_jail_paths() {
    for path in crate::preflight::JAIL_PATHS {
        assert!(
            PROJECT_MOUNT.help.contains(&format!("{path},"))
                || PROJECT_MOUNT.help.contains(&format!("{path})")),
            "{path} is not in PROJECT_MOUNT's help"
        );
    }
}

/// The Nix modules' options (modules/serverSettings.nix, and the HTTP
/// service's own in modules/nixos.nix) repeat some defaults, for their
/// documentation; they must be the launcher's.
#[test]
fn the_nix_module_declares_the_same_defaults() {
    let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../modules/serverSettings.nix");
    let service = concat!(env!("CARGO_MANIFEST_DIR"), "/../modules/nixos.nix");
    for (path, option, setting) in [
        (shared, "maxSessions", &MAX_SESSIONS),
        (shared, "maxSessionsTotal", &MAX_SESSIONS_TOTAL),
        (shared, "maxCheckpoints", &MAX_CHECKPOINTS),
        (shared, "maxRuns", &MAX_RUNS),
        (shared, "maxUnreadBytes", &MAX_UNREAD_BYTES),
        (shared, "sessionIdleTimeout", &SESSION_IDLE_TIMEOUT),
        (shared, "sessionMaxLifetime", &SESSION_MAX_LIFETIME),
        (shared, "projectMount", &PROJECT_MOUNT),
        (shared, "outputMaxMb", &OUTPUT_MAX_MB),
        (shared, "outputCallMb", &OUTPUT_CALL_MB),
        (shared, "filesMb", &FILES_MB),
        (shared, "maxCompositions", &MAX_COMPOSITIONS),
        (shared, "packagesCacheMax", &PACKAGES_CACHE_MAX),
        (service, "maxMcpSessions", &MAX_MCP_SESSIONS),
        (service, "clientRunsShare", &CLIENT_RUNS_SHARE),
        (service, "clientSessionsShare", &CLIENT_SESSIONS_SHARE),
        (service, "mcpSessionIdleTimeout", &MCP_SESSION_IDLE_TIMEOUT),
        (service, "maxConnections", &MAX_CONNECTIONS),
        (service, "requestReadTimeout", &REQUEST_READ_TIMEOUT),
    ] {
        let nix = std::fs::read_to_string(path).expect("the module is next to launcher/");
        let want = match setting.default {
            Some(Default::Number(n)) => n.to_string(),
            Some(Default::Text(t)) => format!("{t:?}"),
            None => unreachable!("{option}: a setting with a default"),
        };
        assert_eq!(
            nix_default(&nix, option).as_deref(),
            Some(want.as_str()),
            "{path}: {option}'s default is not {}'s",
            setting.var_name()
        );
    }
}

/// The text of `default = ...;` in the declaration of `option` (from
/// `option = ...` up to the next line that closes a declaration).
fn nix_default(nix: &str, option: &str) -> Option<String> {
    let start = nix
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{option} = ")))?;
    nix.lines()
        .skip(start)
        .take_while(|l| l.trim() != "};")
        .find_map(|l| l.trim().strip_prefix("default = "))
        .map(|v| v.trim_end_matches(';').to_owned())
}

#[test]
fn the_project_is_writable_only_when_asked_and_a_bad_value_is_named() {
    let writable = |vars: &[(&str, &str)]| parse(args(&[]), env(vars)).map(|o| o.project_writable);
    assert_eq!(writable(&[]), Ok(false));
    assert_eq!(
        writable(&[("NIX_SANDBOX_PROJECT_WRITABLE", "0")]),
        Ok(false)
    );
    assert_eq!(writable(&[("NIX_SANDBOX_PROJECT_WRITABLE", "1")]), Ok(true));
    let bad = writable(&[("NIX_SANDBOX_PROJECT_WRITABLE", "yes")]).unwrap_err();
    assert!(
        bad.starts_with("invalid value for NIX_SANDBOX_PROJECT_WRITABLE: \"yes\"; expected 1"),
        "{bad}"
    );
}

#[test]
fn the_dev_shell_is_an_environment_only_when_asked_and_a_bad_value_is_named() {
    let on = |vars: &[(&str, &str)]| parse(args(&[]), env(vars)).map(|o| o.project_devshell);
    assert_eq!(on(&[]), Ok(false));
    assert_eq!(on(&[("NIX_SANDBOX_PROJECT_DEVSHELL", "0")]), Ok(false));
    assert_eq!(on(&[("NIX_SANDBOX_PROJECT_DEVSHELL", "1")]), Ok(true));
    let bad = on(&[("NIX_SANDBOX_PROJECT_DEVSHELL", "true")]).unwrap_err();
    assert!(
        bad.starts_with("invalid value for NIX_SANDBOX_PROJECT_DEVSHELL: \"true\"; expected 1"),
        "{bad}"
    );
}

#[test]
fn the_layers_bound_is_the_default_unless_given_and_a_bad_value_is_named() {
    let bound = |argv: &[&str], vars: &[(&str, &str)]| {
        parse(args(argv), env(vars)).map(|o| o.bounds.layers_bytes)
    };
    // Unset: MemTotal, read where the layers are made.
    assert_eq!(bound(&[], &[]), Ok(None));
    assert_eq!(
        bound(&[], &[("NIX_SANDBOX_LAYERS_MB", "512")]),
        Ok(Some(512 << 20))
    );
    assert_eq!(
        bound(&["--layers-mb", "64"], &[("NIX_SANDBOX_LAYERS_MB", "512")]),
        Ok(Some(64 << 20))
    );
    let bad = bound(&[], &[("NIX_SANDBOX_LAYERS_MB", "0")]).unwrap_err();
    assert!(bad.starts_with("NIX_SANDBOX_LAYERS_MB=\"0\": "), "{bad}");
}
