//! `INFO` on every node a topology uses: the single node, each shard, the
//! master the Sentinels name now, or every Cluster master.
//!
//! Each node's answer stands alone: a node that fails or answers oddly
//! gives an error for that node, and the others still answer. Every
//! request is bounded by the topology's request deadline.

use redis::Value;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;

use super::{Kind, Topology, deadline_error};

/// One node's answer to `INFO <section>`: its text, or why there is none.
pub type NodeInfo = (String, Result<String, String>);

impl Topology {
    /// `INFO <section>` on every node in use, each as `(host:port, text)`.
    /// Never fails as a whole: a node's failure is that node's error (for
    /// Cluster, a failure to reach the cluster is one error named
    /// `cluster`).
    pub async fn info_of_nodes(&self, section: &str) -> Vec<NodeInfo> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg(section);
        match &self.kind {
            Kind::Single { conn, name, .. } => {
                vec![(name.clone(), self.ask(conn.clone(), &cmd).await)]
            }
            Kind::Shards { shards, .. } => {
                let mut out = Vec::new();
                for (name, conn) in shards.nodes() {
                    out.push((name.to_owned(), self.ask(conn.clone(), &cmd).await));
                }
                out
            }
            Kind::Sentinel(master) => {
                let (host, port) = master.master_addr();
                let answer = tokio::time::timeout(self.deadline, master.send(&cmd)).await;
                let answer = answer
                    .unwrap_or_else(|_| Err(deadline_error(self.deadline)))
                    .map_err(|e| e.to_string())
                    .and_then(|v| text_of(&v));
                vec![(format!("{host}:{port}"), answer)]
            }
            Kind::Cluster(conn) => self.ask_cluster(conn.clone(), &cmd).await,
        }
    }

    /// One node's answer to `cmd`, as text.
    async fn ask(&self, mut conn: ConnectionManager, cmd: &redis::Cmd) -> Result<String, String> {
        tokio::time::timeout(self.deadline, conn.send_packed_command(cmd))
            .await
            .unwrap_or_else(|_| Err(deadline_error(self.deadline)))
            .map_err(|e| e.to_string())
            .and_then(|v| text_of(&v))
    }

    /// Every Cluster master's answer: redis-rs sends `INFO` to each master
    /// and answers a map of address to reply.
    async fn ask_cluster(&self, mut conn: ClusterConnection, cmd: &redis::Cmd) -> Vec<NodeInfo> {
        let reply = tokio::time::timeout(self.deadline, conn.req_packed_command(cmd))
            .await
            .unwrap_or_else(|_| Err(deadline_error(self.deadline)));
        match reply {
            Ok(Value::Map(nodes)) => nodes
                .iter()
                .map(|(node, reply)| {
                    let name = text_of(node).unwrap_or_else(|_| "unknown".to_owned());
                    (name, text_of(reply))
                })
                .collect(),
            Ok(other) => vec![("cluster".to_owned(), text_of(&other))],
            Err(e) => vec![("cluster".to_owned(), Err(e.to_string()))],
        }
    }
}

/// A reply that should be text (a bulk, verbatim or simple string).
pub(crate) fn text_of(v: &Value) -> Result<String, String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Ok(text.clone()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::ServerError(e) => Err(format!(
            "{}: {}",
            e.code(),
            e.details().unwrap_or("(no details)")
        )),
        other => Err(format!("not a text reply: {}", kind_of(other))),
    }
}

/// A reply's kind, for an error message (never its contents).
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Int(_) => "integer",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Set(_) => "set",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_replies_are_text_and_others_are_errors() {
        assert_eq!(text_of(&Value::BulkString(b"a:1".to_vec())).unwrap(), "a:1");
        assert_eq!(text_of(&Value::SimpleString("x".into())).unwrap(), "x");
        assert!(text_of(&Value::Nil).unwrap_err().contains("nil"));
        assert!(text_of(&Value::Int(3)).is_err());
        assert!(text_of(&Value::Array(vec![])).is_err());
        // Not UTF-8: read lossily, never a panic.
        assert!(text_of(&Value::BulkString(vec![0xff, b':', 0xfe])).is_ok());
    }
}
