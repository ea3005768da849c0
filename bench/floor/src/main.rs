//! A baseline of bench.py: the least an MCP server must do for a session
//! call. It runs a session wrapper (its arguments) and answers MCP over
//! stdio from one thread with blocking reads: `initialize`, and `tools/call`
//! by parsing the request with serde_json, writing the agent's `exec` frame,
//! reading and parsing the agent's reply, and writing the answer (the
//! output as text, the reply's other fields under `_meta`). No runtime, no
//! session table, no verification of the reply, no limits: beside the bare
//! relay (relay.rs), which only copies bytes, the round trip through it
//! shows what parsing and answering JSON-RPC itself costs on the machine,
//! and what the launcher's protocol library and its own work add to that.
//!
//! `json-floor WRAPPER [ARG...]`; built by bench/run.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};

use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Deserialize)]
struct Message {
    id: Option<Value>,
    method: Option<String>,
    #[serde(default)]
    params: Value,
}

#[derive(Deserialize)]
struct CallParams {
    arguments: Arguments,
}

#[derive(Deserialize)]
struct Arguments {
    code: String,
}

/// `value` as one line of JSON, newline included.
fn line_of(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).expect("a Value serialises");
    bytes.push(b'\n');
    bytes
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: json-floor WRAPPER [ARG...]");
        return ExitCode::from(2);
    };
    let mut child = match Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("json-floor: cannot run {program}: {e}");
            return ExitCode::from(2);
        }
    };
    let (Some(mut to_agent), Some(from_agent)) = (child.stdin.take(), child.stdout.take()) else {
        unreachable!("both were set to piped")
    };
    let mut from_agent = BufReader::new(from_agent);
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let (mut line, mut reply) = (String::new(), String::new());
    let mut next_id = 0u64;
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) => {
                eprintln!("json-floor: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        }
        let message: Message = match serde_json::from_str(&line) {
            Ok(message) => message,
            Err(e) => {
                eprintln!(
                    "json-floor: not a JSON-RPC message ({e}): {}",
                    line.trim_end()
                );
                continue;
            }
        };
        // Notifications get no answer.
        let Some(id) = message.id else { continue };
        let mut answer = match message.method.as_deref() {
            Some("initialize") => json!({"result": {
                "protocolVersion": message.params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "json-floor", "version": "0"},
            }}),
            Some("tools/call") => {
                let code = match CallParams::deserialize(&message.params) {
                    Ok(params) => params.arguments.code,
                    Err(e) => {
                        eprintln!("json-floor: tools/call without arguments.code: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                next_id += 1;
                let frame =
                    json!({"op": "exec", "id": next_id, "code": code, "output_bytes": 65536});
                reply.clear();
                let read = to_agent
                    .write_all(&line_of(&frame))
                    .and_then(|()| from_agent.read_line(&mut reply));
                let mut fields: Map<String, Value> = match read {
                    Ok(n) if n > 0 => match serde_json::from_str(&reply) {
                        Ok(fields) => fields,
                        Err(e) => {
                            eprintln!("json-floor: the agent's reply is not a JSON object: {e}");
                            return ExitCode::FAILURE;
                        }
                    },
                    Ok(_) => {
                        eprintln!("json-floor: the wrapper closed its output");
                        return ExitCode::FAILURE;
                    }
                    Err(e) => {
                        eprintln!("json-floor: talking to the wrapper: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                let text = match fields.remove("stdout") {
                    Some(Value::String(text)) if !text.is_empty() => text,
                    _ => "(no output)".to_owned(),
                };
                fields.remove("stderr");
                let failed = fields.get("status") != Some(&json!(0));
                json!({"result": {
                    "content": [{"type": "text", "text": text}],
                    "isError": failed,
                    "_meta": {"json-floor/result": fields},
                }})
            }
            _ => json!({"error": {"code": -32601, "message": "method not found"}}),
        };
        answer["jsonrpc"] = json!("2.0");
        answer["id"] = id;
        if let Err(e) = output
            .write_all(&line_of(&answer))
            .and_then(|()| output.flush())
        {
            eprintln!("json-floor: writing stdout: {e}");
            return ExitCode::FAILURE;
        }
    }
}
