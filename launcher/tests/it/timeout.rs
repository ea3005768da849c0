//! A call's own timeout (`timeout_s`): more time than the environment's
//! `timeout_s` when asked, cut to its `max_timeout_s` (and said), in a
//! run and in a session; the next call without it has the environment's
//! again; a value that is no whole number of seconds is refused. Progress
//! counts toward the call's timeout.

use serde_json::json;

use crate::common::*;

/// The fixtures with `timeout_s` 1 and `max_timeout_s` 3 in every
/// environment, their run and session wrappers marked.
fn short(mark: &str) -> Manifest {
    let mut m = template();
    for env in m["environments"].as_object_mut().unwrap().values_mut() {
        env["run"].as_array_mut().unwrap().push(json!(mark));
        env["session"].as_array_mut().unwrap().push(json!(mark));
        env["limits"]["timeout_s"] = json!(1);
        env["limits"]["max_timeout_s"] = json!(3);
    }
    Manifest::new(&m)
}

const LATE: &str = "sleep 2; echo done";

#[tokio::test]
async fn a_run_given_more_time_finishes_and_one_past_the_ceiling_is_cut() {
    let mark = marker("longer");
    let s = Server::start(vec![short(&mark)]).await;
    // Without the argument, the environment's 1 s.
    let r = s.run("shell", LATE).await;
    assert_eq!(text(&r), "timed out after 1 s; the process tree was killed");
    // Asked for 3 s: it finishes, and nothing is said of the timeout.
    let r = s
        .call(json!({"env": "shell", "code": LATE, "timeout_s": 3}))
        .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "done\n");
    // Asked for 100 s: cut to the ceiling, stopped there, and said.
    let r = s
        .call(json!({"env": "shell", "code": "echo started; sleep 60", "timeout_s": 100}))
        .await;
    assert_eq!(
        text(&r),
        "started\ntimed out after 3 s; the process tree was killed\n\
         timeout_s 100 cut to 3 s, the most this environment allows"
    );
    let ms = facts(&r)["duration_ms"].as_u64().unwrap();
    assert!((3000..20_000).contains(&ms), "{ms} ms");
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_session_call_given_more_time_finishes_and_the_next_has_the_default() {
    let mark = marker("longer-session");
    let s = Server::start(vec![short(&mark)]).await;
    let first = json!({"env": "python", "session": "s", "timeout_s": 3,
                       "code": "import time\ntime.sleep(2)\nx = 42\nprint('slept')"});
    let r = s.call(first).await;
    assert_eq!(text(&r), "slept\n", "{r:?}");
    // The session made by a longer call keeps the environment's timeout.
    let r = s
        .call(json!({"session": "s", "code": "import time\ntime.sleep(2)\nprint('late')"}))
        .await;
    assert!(
        text(&r).contains("interrupted after 1 s; state kept"),
        "{}",
        text(&r)
    );
    let r = s
        .call(json!({"session": "s", "code": "print(x)", "timeout_s": 9}))
        .await;
    assert_eq!(
        text(&r),
        "42\nexit code 0\ntimeout_s 9 cut to 3 s, the most this environment allows"
    );
}

#[tokio::test]
async fn a_timeout_that_is_no_whole_number_of_seconds_is_refused() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    for bad in [json!(0), json!(-1), json!(2.5), json!("60")] {
        let r = s
            .call(json!({"env": "shell", "code": "echo ran", "timeout_s": bad}))
            .await;
        assert_eq!(
            error_code(&r).as_deref(),
            Some("invalid_arguments"),
            "{bad}"
        );
        let t = text(&r);
        assert!(
            t.starts_with(&format!(
                "error[invalid_arguments]: `timeout_s` must be a whole number of seconds, at \
                 least 1 (got {bad})"
            )) && t.lines().count() == 1,
            "{t}"
        );
    }
    // The server still answers.
    assert_eq!(text(&s.run("shell", "echo ok").await), "ok\n");
}
