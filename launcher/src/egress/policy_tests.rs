use super::*;

fn policy(json: &str) -> Policy {
    match serde_json::from_str::<Network>(json).unwrap() {
        Network::Policy(p) => p,
        other => panic!("not a policy: {other:?}"),
    }
}

fn sample() -> Policy {
    policy(
        r#"{
          "allow": [
            { "host": "pypi.org" },
            { "host": "*.pythonhosted.org", "port": 443 },
            { "host": "api.example.com", "paths": ["/v1/"], "methods": ["GET"], "credentials": ["TOKEN"] },
            { "host": "127.0.0.1", "port": 8080 }
          ],
          "credentials": {
            "TOKEN": { "placeholder": "placeholder-TOKEN", "from_env": "REAL", "headers": ["Authorization"] }
          }
        }"#,
    )
}

#[test]
fn booleans_stay_booleans() {
    assert_eq!(
        serde_json::from_str::<Network>("false").unwrap(),
        Network::Open(false)
    );
    assert_eq!(
        serde_json::from_str::<Network>("true").unwrap(),
        Network::Open(true)
    );
    let e = serde_json::from_str::<Network>("\"yes\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected true, false or a policy"), "{e}");
}

#[test]
fn hosts_match_exactly_or_strictly_under_a_suffix() {
    assert!(host_matches("pypi.org", "pypi.org"));
    assert!(host_matches("PyPI.org.", "pypi.org"));
    assert!(!host_matches("pypi.org", "evil-pypi.org"));
    assert!(!host_matches("pypi.org", "pypi.org.evil.com"));
    assert!(host_matches("*.example.com", "a.example.com"));
    assert!(host_matches("*.example.com", "a.b.example.com"));
    assert!(!host_matches("*.example.com", "example.com"));
    assert!(!host_matches("*.example.com", "badexample.com"));
}

#[test]
fn connect_is_decided_by_host_and_port() {
    let p = sample();
    assert_eq!(p.connect("pypi.org", 443), Ok(Tunnel::Pass));
    assert_eq!(p.connect("PYPI.ORG", 80), Ok(Tunnel::Pass));
    assert_eq!(p.connect("pypi.org", 22), Err(Refusal::NotAllowed));
    assert_eq!(p.connect("files.pythonhosted.org", 443), Ok(Tunnel::Pass));
    assert_eq!(
        p.connect("files.pythonhosted.org", 80),
        Err(Refusal::NotAllowed)
    );
    assert_eq!(p.connect("example.org", 443), Err(Refusal::NotAllowed));
    // A rule that must see requests (paths, methods, credentials) makes the
    // proxy terminate the TLS.
    assert_eq!(p.connect("api.example.com", 443), Ok(Tunnel::Terminate));
    // An address literal only when a rule names it.
    assert_eq!(p.connect("151.101.0.223", 443), Err(Refusal::NotAllowed));
    assert_eq!(p.connect("127.0.0.1", 8080), Ok(Tunnel::Pass));
}

fn allowed<'a>(path: &str, credentials: &[&'a str]) -> Result<Allowed<'a>, Refusal> {
    Ok(Allowed {
        path: path.to_owned(),
        credentials: credentials.to_vec(),
    })
}

#[test]
fn requests_are_decided_by_method_and_path_too() {
    let p = sample();
    let tls = Transport::Tls;
    assert_eq!(
        p.request("pypi.org", 80, "POST", "/anything", Transport::Cleartext),
        allowed("/anything", &[])
    );
    assert_eq!(
        p.request("api.example.com", 443, "GET", "/v1/x", tls),
        allowed("/v1/x", &["TOKEN"])
    );
    assert_eq!(
        p.request("api.example.com", 443, "POST", "/v1/x", tls),
        Err(Refusal::Method("POST".into()))
    );
    assert_eq!(
        p.request("api.example.com", 443, "GET", "/v2/x", tls),
        Err(Refusal::Path {
            sent: "/v2/x".into(),
            normal: "/v2/x".into()
        })
    );
    assert_eq!(
        p.request("denied.example", 80, "GET", "/", Transport::Cleartext),
        Err(Refusal::NotAllowed)
    );
}

#[test]
fn a_host_with_a_credential_is_reached_over_tls_only() {
    let p = sample();
    for port in [80, 443] {
        let why = p
            .request(
                "api.example.com",
                port,
                "GET",
                "/v1/x",
                Transport::Cleartext,
            )
            .unwrap_err();
        assert_eq!(why, Refusal::Cleartext);
        assert_eq!(
            why.to_string(),
            "a credential goes only over HTTPS: use https://"
        );
    }
}

#[test]
fn only_a_rule_naming_an_address_lets_it_through() {
    let p = sample();
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    assert!(p.names_address("127.0.0.1", 8080, loopback));
    assert!(!p.names_address("pypi.org", 443, loopback));
}

#[test]
fn a_sound_policy_has_no_problems() {
    assert_eq!(sample().problems(), vec![]);
    assert_eq!(
        sample().hosts(),
        [
            "pypi.org",
            "*.pythonhosted.org:443",
            "api.example.com",
            "127.0.0.1:8080"
        ]
    );
}

#[test]
fn unknown_fields_and_bad_values_are_problems() {
    let p = policy(
        r#"{
          "allow": [
            { "host": "a b", "paths": ["v1"], "methods": ["get"], "credentials": ["NOPE"], "max_bytes": 5 }
          ],
          "credentials": {
            "T": { "placeholder": "short", "from_file": "/nix/store/x-secret", "from_env": "X", "headers": [] },
            "U": { "placeholder": "placeholder-U", "from_env": "U", "headers": ["Bad Header"] }
          },
          "rate": 3
        }"#,
    );
    let fields: Vec<String> = p.problems().into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        [
            "rate",
            "allow[0].max_bytes",
            "allow[0].host",
            "allow[0].paths",
            "allow[0].methods",
            "allow[0].credentials",
            "credentials.T.from_file",
            "credentials.T.from_file",
            "credentials.T.placeholder",
            "credentials.T.headers",
            "credentials.U.headers",
        ]
    );
}

#[test]
fn paths_are_decided_on_the_normalised_path() {
    let p = sample();
    let tls = Transport::Tls;
    for attack in [
        "/v1/../admin",
        "/v1/%2e%2e/admin",
        "/v1/..%2fadmin",
        "/v1/./../admin",
        "/v1//../admin",
        "/v1/x/../../admin",
        "/v1/..;/admin",
        "/v1/..\\admin",
        "/v1/..%5Cadmin",
    ] {
        assert!(
            p.request("api.example.com", 443, "GET", attack, tls)
                .is_err(),
            "{attack} was allowed"
        );
    }
    assert_eq!(
        p.request("api.example.com", 443, "GET", "/v1/../admin", tls)
            .unwrap_err()
            .to_string(),
        "path /v1/../admin not allowed: it is /admin"
    );
    assert_eq!(
        p.request("api.example.com", 443, "GET", "/v1/..;/admin", tls)
            .unwrap_err()
            .to_string(),
        "ambiguous path /v1/..;/admin: a ; parameter"
    );
    // What is allowed is sent in the form it was decided in.
    assert_eq!(
        p.request("api.example.com", 443, "GET", "/v1/a/./b/../%7Ec", tls),
        allowed("/v1/a/~c", &["TOKEN"])
    );
    // A host whose rules name no path gets its path as it came.
    assert_eq!(
        p.request("pypi.org", 443, "GET", "/simple/../x;y", tls),
        allowed("/simple/../x;y", &[])
    );
}

#[test]
fn a_rules_paths_must_be_in_normal_form() {
    let p = policy(
        r#"{ "allow": [ { "host": "a.example", "paths": ["/v1/", "/a/../b", "/%7Eme", "/x;y", "v2"] } ] }"#,
    );
    let problems: Vec<String> = p.problems().into_iter().map(|(_, why)| why).collect();
    assert_eq!(
        problems,
        [
            r#""/a/../b" is not in normal form: write "/b""#,
            r#""/%7Eme" is not in normal form: write "/~me""#,
            r#""/x;y" can never match: a path with a ; parameter is refused"#,
            r#""v2" does not start with /"#,
        ]
    );
}
