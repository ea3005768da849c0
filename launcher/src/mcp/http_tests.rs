//! Tests of the HTTP transport's own rules: which requests
//! can be cancelled when their client goes away.

use super::*;
use crate::testing::headers;

#[test]
fn only_requests_in_a_session_can_be_cancelled() {
    let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#;
    let in_session = headers(&[("mcp-session-id", "abc")]);
    let (session, id) = call_in_session(&in_session, call).unwrap();
    assert_eq!((session.as_ref(), id), ("abc", json!(7)));
    assert!(call_in_session(&headers(&[]), call).is_none());
    let notification = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert!(call_in_session(&in_session, notification).is_none());
    assert!(call_in_session(&in_session, b"not json").is_none());
}
