//! STUB (replaced by the helper's version).
use crate::budget::Account;
use crate::error::{Error, Result};
use crate::jsonrpc::{Batch, Message, parse_messages_bounded};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
pub(crate) struct Lines<R> {
    r: BufReader<R>,
    max_batch: usize,
    queue: std::collections::VecDeque<Message>,
}
impl<R: AsyncRead + Unpin> Lines<R> {
    pub(crate) fn new(
        reader: R,
        _max_line: usize,
        max_batch: usize,
        _account: Option<Account>,
    ) -> Self {
        Lines {
            r: BufReader::new(reader),
            max_batch,
            queue: Default::default(),
        }
    }
    pub(crate) async fn next(&mut self) -> Result<Option<Message>> {
        loop {
            if let Some(m) = self.queue.pop_front() {
                return Ok(Some(m));
            }
            let mut line = String::new();
            let n = self
                .r
                .read_line(&mut line)
                .await
                .map_err(|e| Error::transport(Box::new(e)))?;
            if n == 0 {
                return Ok(None);
            }
            match parse_messages_bounded(line.trim().as_bytes(), self.max_batch) {
                Ok(Batch::One(m)) => return Ok(Some(m)),
                Ok(Batch::Many(v)) => self.queue.extend(v),
                Err(_) => continue,
            }
        }
    }
}
