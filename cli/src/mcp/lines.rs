//! The server's standard input and output, line by line, between the client and `rmcp`: a line
//! that is not JSON gets JSON-RPC's parse error (`-32700`, id `null`) and a JSON value that is
//! not a JSON-RPC message its invalid request (`-32700`'s sibling, `-32600`), as the protocol
//! asks, where `rmcp` would skip the line without a word and leave the client waiting. Every
//! other line goes to `rmcp` as it came; its replies and ours are written whole, one a line.

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// How many bytes each pipe to and from `rmcp` buffers.
const PIPE: usize = 1 << 16;

/// The reply to a line that `rmcp` must not see, if it is one.
pub(crate) fn refusal(line: &str) -> Option<Value> {
    let error = |id: Value, code: i64, message: String| json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    match serde_json::from_str::<Value>(line) {
        Err(e) => Some(error(Value::Null, -32700, format!("Parse error: not JSON ({e})"))),
        Ok(Value::Object(m)) if m.get("jsonrpc").and_then(Value::as_str) == Some("2.0") => None,
        // A batch is `rmcp`'s to answer.
        Ok(Value::Array(_)) => None,
        Ok(Value::Object(m)) => {
            let id = m.get("id").filter(|id| id.is_string() || id.is_number()).cloned().unwrap_or(Value::Null);
            Some(error(id, -32600, "Invalid Request: not a JSON-RPC 2.0 message (no \"jsonrpc\": \"2.0\")".into()))
        }
        Ok(_) => Some(error(Value::Null, -32600, "Invalid Request: not a JSON-RPC message".into())),
    }
}

/// Pipes standing for `rmcp`'s input and output, and the tasks that fill and drain them from
/// `input` and into `output` (the process's standard input and output).
pub(crate) fn filtered(
    input: impl AsyncRead + Unpin + Send + 'static,
    mut output: impl AsyncWrite + Unpin + Send + 'static,
) -> (DuplexStream, DuplexStream) {
    let (mut to_server, server_in) = tokio::io::duplex(PIPE);
    let (server_out, from_server) = tokio::io::duplex(PIPE);
    let (ours, mut ours_rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut lines = BufReader::new(input).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim().is_empty() {
                continue;
            }
            match refusal(&line) {
                Some(reply) => {
                    if ours.send(reply.to_string()).is_err() {
                        break;
                    }
                }
                None => {
                    let sent = to_server.write_all(line.as_bytes()).await.and(to_server.write_all(b"\n").await);
                    if sent.is_err() {
                        break;
                    }
                }
            }
        }
        // The client closed its side: so does `rmcp`'s input, and the server ends.
        to_server.shutdown().await.ok();
    });
    tokio::spawn(async move {
        let mut replies = BufReader::new(from_server).lines();
        let mut ours_open = true;
        loop {
            let line = tokio::select! {
                line = replies.next_line() => match line {
                    Ok(Some(line)) => line,
                    _ => break,
                },
                line = ours_rx.recv(), if ours_open => match line {
                    Some(line) => line,
                    None => {
                        ours_open = false;
                        continue;
                    }
                },
            };
            let written = output.write_all(line.as_bytes()).await.and(output.write_all(b"\n").await);
            if written.and(output.flush().await).is_err() {
                break;
            }
        }
    });
    (server_in, server_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_that_are_not_json_rpc_are_refused_as_the_protocol_says() {
        let code = |line: &str| refusal(line).map(|r| (r["error"]["code"].as_i64().unwrap(), r["id"].clone()));
        assert_eq!(code("{this is not json"), Some((-32700, Value::Null)));
        assert_eq!(code(r#"{"id": 4, "method": "tools/list"}"#), Some((-32600, json!(4))));
        assert_eq!(code("42"), Some((-32600, Value::Null)));
        assert_eq!(code(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#), None);
        assert_eq!(code(r#"[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]"#), None);
    }
}
