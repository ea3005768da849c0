//! `sandbox exec ID -- CMD [ARG]...` (docs/cli.md): the command runs in the
//! session's jail; its output comes as the server's events, written to
//! this process's stdout and stderr as they come, or, with `--json`, as
//! NDJSON events on stdout. The exit status is the command's. Ctrl-C ends
//! this process, which closes the connection: the server then kills the
//! command.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::Server;
use crate::control::wire::{self, Event};

/// Runs `argv` in session `name` of `server`; the command's status.
pub fn run(
    server: &Server,
    name: String,
    argv: Vec<String>,
    json: bool,
) -> Result<ExitCode, String> {
    let op = wire::Op::Exec { id: name, argv };
    // No read timeout: a command may be silent for long; the server ends
    // it at the session's timeout.
    let stream = server.send(&op, None)?;
    relay(server, stream, json)
}

/// Writes the events `stream` answers with (an `exec`'s or `enter`'s) as
/// they come, until the exit event; its status.
pub fn relay(server: &Server, stream: UnixStream, json: bool) -> Result<ExitCode, String> {
    let mut lines = BufReader::new(stream);
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let mut carry = [Vec::new(), Vec::new()];
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = lines
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("server {} stopped answering: {e}", server.pid))?;
        if read == 0 {
            return Err(format!(
                "server {} closed the connection before the command ended (its log says why)",
                server.pid
            ));
        }
        let answer: wire::Response = serde_json::from_slice(&line).map_err(|e| {
            format!(
                "server {} answered what this CLI cannot read ({e}): use the nix-sandbox-mcp that runs it",
                server.pid
            )
        })?;
        if !answer.ok {
            let error = answer.error.unwrap_or_else(|| "refused".into());
            if answer.not_found {
                eprintln!("nix-sandbox-mcp sandbox: {error}");
                return Ok(ExitCode::from(127));
            }
            return Err(error);
        }
        let written = match answer.event {
            Some(Event::Stdout { data }) | Some(Event::Stderr { data }) if data.is_empty() => {
                Ok(())
            }
            Some(Event::Stdout { data }) => {
                let bytes = bytes(&data, server.pid)?;
                match json {
                    true => json_chunk(&mut out, "stdout", &mut carry[0], &bytes),
                    false => out.write_all(&bytes).and_then(|()| out.flush()),
                }
            }
            Some(Event::Stderr { data }) => {
                let bytes = bytes(&data, server.pid)?;
                match json {
                    true => json_chunk(&mut out, "stderr", &mut carry[1], &bytes),
                    false => err.write_all(&bytes).and_then(|()| err.flush()),
                }
            }
            Some(Event::Exit {
                code,
                signal,
                timed_out,
            }) => {
                let end = if json {
                    json_exit(&mut out, &carry, code, signal, timed_out)
                } else {
                    if timed_out {
                        eprintln!(
                            "nix-sandbox-mcp sandbox: the command ran past the session's timeout and was killed"
                        );
                    }
                    Ok(())
                };
                end.map_err(|e| format!("cannot write the output: {e}"))?;
                return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
            }
            None => Ok(()),
        };
        // A closed stdout (`| head`) ends this process, and so the command.
        written.map_err(|e| format!("cannot write the output: {e}"))?;
    }
}

/// The `--json` end: each stream's incomplete character left (as
/// base64), then the `exit` event.
fn json_exit(
    out: &mut impl Write,
    carry: &[Vec<u8>; 2],
    code: i32,
    signal: Option<i32>,
    timed_out: bool,
) -> std::io::Result<()> {
    for (stream, rest) in ["stdout", "stderr"].into_iter().zip(carry) {
        if !rest.is_empty() {
            let data = proto::frame::encode_data(rest);
            line_of(out, &json!({"type": stream, "base64": data}))?;
        }
    }
    let mut exit = json!({"type": "exit", "code": code});
    if let Some(signal) = signal {
        exit["signal"] = signal.into();
    }
    if timed_out {
        exit["timed_out"] = true.into();
    }
    line_of(out, &exit)
}

fn bytes(data: &str, pid: u32) -> Result<Vec<u8>, String> {
    proto::frame::decode_data(data)
        .map_err(|e| format!("server {pid} sent output that is not base64: {e}"))
}

fn line_of(out: &mut impl Write, value: &Value) -> std::io::Result<()> {
    writeln!(out, "{value}")?;
    out.flush()
}

/// Writes `bytes` of `stream` as NDJSON events: `{"type":STREAM,"text":...}`
/// for UTF-8, `{"type":STREAM,"base64":...}` for bytes that are not; an
/// incomplete character at the end waits in `carry` for the next chunk.
fn json_chunk(
    out: &mut impl Write,
    stream: &str,
    carry: &mut Vec<u8>,
    bytes: &[u8],
) -> std::io::Result<()> {
    carry.extend_from_slice(bytes);
    let all = std::mem::take(carry);
    let mut rest = &all[..];
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                line_of(out, &json!({"type": stream, "text": text}))?;
                break;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                if !valid.is_empty() {
                    let text = String::from_utf8_lossy(valid);
                    line_of(out, &json!({"type": stream, "text": text}))?;
                }
                match e.error_len() {
                    None => {
                        *carry = after.to_vec();
                        break;
                    }
                    Some(n) => {
                        let data = proto::frame::encode_data(&after[..n]);
                        line_of(out, &json!({"type": stream, "base64": data}))?;
                        rest = &after[n..];
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<Value> {
        let mut out = Vec::new();
        let mut carry = Vec::new();
        for chunk in chunks {
            json_chunk(&mut out, "stdout", &mut carry, chunk).unwrap();
        }
        assert!(carry.is_empty());
        (String::from_utf8(out).unwrap().lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn text_is_text_and_other_bytes_are_base64_in_order() {
        let got = events(&[b"a\xffb\n"]);
        assert_eq!(
            got,
            [
                json!({"type": "stdout", "text": "a"}),
                json!({"type": "stdout", "base64": "/w=="}),
                json!({"type": "stdout", "text": "b\n"}),
            ]
        );
    }

    #[test]
    fn a_character_cut_between_chunks_is_joined() {
        // "é" is C3 A9.
        let got = events(&[b"x\xc3", b"\xa9y"]);
        assert_eq!(
            got,
            [
                json!({"type": "stdout", "text": "x"}),
                json!({"type": "stdout", "text": "éy"}),
            ]
        );
    }
}
