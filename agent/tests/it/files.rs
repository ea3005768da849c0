//! Files in and outputs out: files an exec passes in, symbolic
//! links planted by code refused, outputs listed and read, and matplotlib's
//! `plt.show()` saving to outputs/.

use proto::files::Upload;
use proto::frame::{ErrorCode, Reply};

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, OUTPUT_BYTES, assert_ok};

both_modes!(
    files_passed_in_are_read_by_the_code,
    symbolic_links_planted_by_code_are_refused,
    outputs_of_a_call_are_listed_and_readable,
    plt_show_saves_the_figures_to_outputs,
);

fn file(path: &str, content: &str) -> Upload {
    Upload {
        path: path.into(),
        content: content.into(),
        replace: false,
    }
}

fn files_passed_in_are_read_by_the_code(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let id = a.send_exec_with(
        "import csv\nrows = list(csv.reader(open('data.csv')))\n\
         print(len(rows), rows[1][1], open('in/notes/n.txt').read())",
        OUTPUT_BYTES,
        vec![
            file("data.csv", "a,b\n1,2\n3,4\n"),
            file("in/notes/n.txt", "héllo"),
        ],
    );
    let reply = a.exec_reply(id);
    assert_ok(&reply);
    assert_eq!(reply.stdout, "3 2 héllo\n");
    assert!(
        reply.outputs.is_empty(),
        "files passed in are not outputs: {reply:?}"
    );
    // Passing a file again is refused, and nothing of the call is
    // written, unless it says `replace`.
    let id = a.send_exec_with(
        "print('ran')",
        OUTPUT_BYTES,
        vec![file("new.csv", "n"), file("data.csv", "new")],
    );
    match a.reply(id) {
        Reply::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::FileExists, "{message}");
            assert_eq!(message, "`data.csv` exists in /workspace");
        }
        other => panic!("wanted file_exists, got {other:?}"),
    }
    let replaced = Upload {
        replace: true,
        ..file("data.csv", "new")
    };
    let id = a.send_exec_with(
        "import os\nprint(open('data.csv').read(), os.path.exists('new.csv'))",
        OUTPUT_BYTES,
        vec![replaced],
    );
    assert_eq!(a.exec_reply(id).stdout, "new False\n");
    // Binary content, in several puts, comes through byte for byte.
    let every: Vec<u8> = (0..=255u8)
        .cycle()
        .take(proto::frame::PUT_CHUNK_BYTES + 7)
        .collect();
    let id = a.send_exec_with(
        "d = open('b.bin','rb').read()\nprint(len(d), d == (bytes(range(256)) * len(d))[:len(d)])",
        OUTPUT_BYTES,
        vec![Upload {
            path: "b.bin".into(),
            content: every.clone(),
            replace: false,
        }],
    );
    let reply = a.exec_reply(id);
    assert_ok(&reply);
    assert_eq!(reply.stdout, format!("{} True\n", every.len()));
}

fn symbolic_links_planted_by_code_are_refused(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    assert_ok(&a.exec("ln -s /etc etc-link && ln -s /etc/hostname host-link && mkfifo fifo"));
    for (path, why) in [
        ("etc-link/x", "`etc-link` is a symbolic link"),
        ("host-link", "`host-link` is a symbolic link"),
        ("../escape", ". or .."),
        ("/etc/x", "absolute"),
        ("fifo", "fifo"),
    ] {
        let upload = Upload {
            replace: true,
            ..file(path, "x")
        };
        let id = a.send_exec_with("echo ran", OUTPUT_BYTES, vec![upload]);
        match a.reply(id) {
            Reply::Error { code, message, .. } => {
                assert_eq!(code, ErrorCode::BadFile, "{path}: {message}");
                assert!(message.contains(why), "{path}: {message}");
            }
            other => panic!("{path}: wanted bad_file, got {other:?}"),
        }
    }
    // Nothing ran, nothing was written through the links.
    let reply = a.exec("echo still; ls etc-link/x 2>&1 | head -c 0; test -e /etc/x || echo clean");
    assert_eq!(reply.stdout, "still\nclean\n");
}

fn outputs_of_a_call_are_listed_and_readable(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    // Outputs of earlier calls are not listed again.
    assert_ok(&a.exec("echo old > outputs/old.txt"));
    let reply = a.exec(
        "printf '\\x89PNG\\r\\n\\x1a\\nrest' > outputs/p.png; mkdir -p outputs/t; \
         printf 'a,b\\n' > outputs/t/d.csv; ln -s /etc/passwd outputs/pw",
    );
    assert_ok(&reply);
    let listed: Vec<(&str, u64, &str)> = reply
        .outputs
        .iter()
        .map(|o| (o.path.as_str(), o.size, o.mime.as_str()))
        .collect();
    assert_eq!(
        listed,
        vec![("p.png", 12, "image/png"), ("t/d.csv", 4, "text/csv")]
    );
    let png = a.read("p.png", 1 << 20);
    assert_eq!(png.bytes().unwrap(), b"\x89PNG\r\n\x1a\nrest");
    assert!(png.eof);
    let id = a.send_read("pw", 0, 100);
    assert!(matches!(
        a.reply(id),
        Reply::Error {
            code: ErrorCode::NotFound,
            ..
        }
    ));
    // A read is answered while code runs.
    let running = a.send_exec("sleep 1; echo done");
    let csv = a.read("t/d.csv", 100);
    assert_eq!(csv.bytes().unwrap(), b"a,b\n");
    assert_eq!(a.exec_reply(running).stdout, "done\n");
}

fn plt_show_saves_the_figures_to_outputs(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let reply = a.exec(
        "import os, matplotlib.pyplot as plt\nprint(os.environ['MPLBACKEND'])\n\
         plt.plot([1, 2, 3]); plt.figure(); plt.bar([1], [2]); plt.show()",
    );
    // (stderr may hold fontconfig's complaint: the fixture jail has no /etc/fonts.)
    assert_eq!(reply.status, 0, "{reply:?}");
    assert_eq!(reply.stdout, "Agg\n", "{reply:?}");
    let listed: Vec<(&str, &str)> = reply
        .outputs
        .iter()
        .map(|o| (o.path.as_str(), o.mime.as_str()))
        .collect();
    assert_eq!(
        listed,
        vec![("figure-1.png", "image/png"), ("figure-2.png", "image/png")],
        "{reply:?}"
    );
    // The figures were closed; the next show saves the next number.
    let reply = a.exec("print(plt.get_fignums())\nplt.plot([3, 1]); plt.show()");
    assert_eq!(reply.stdout, "[]\n", "{reply:?}");
    assert_eq!(reply.outputs.len(), 1, "{reply:?}");
    assert_eq!(reply.outputs[0].path, "figure-3.png");
}
