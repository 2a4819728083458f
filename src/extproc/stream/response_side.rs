//! The response side of a stream: response headers (hooks, header edits, server-error
//! counting), the body (SSE chunks echoed as they come with usage scanned on the way, JSON
//! buffered then echoed, the model name restored when it was rewritten), the dynamic metadata
//! of the final response message, and completion accounting that runs exactly once.

use super::{ResponseMode, Scheduled, StreamProcessor, read_headers};
use crate::extproc::response::{self as resp, Direction};
use crate::framework::result::{HeaderEdits, MetadataEdits};
use crate::proto::envoy::config::core::v3::HeaderMap;
use crate::proto::ext_proc::{CommonResponse, ProcessingResponse};
use crate::request::headers;
use crate::request::usage::{SseUsageScanner, Usage, restore_model_name, usage_from_json};

impl StreamProcessor {
    pub(super) fn on_response_headers(
        &mut self,
        map: Option<&HeaderMap>,
        end_of_stream: bool,
    ) -> Vec<ProcessingResponse> {
        let h = read_headers(map);
        let status = h.get(":status").and_then(|s| s.parse::<u16>().ok());
        if h.get("content-type").is_some_and(|ct| ct.contains("text/event-stream")) {
            self.response_streaming = true;
        }
        if self.response_streaming {
            self.sse = Some(SseUsageScanner::default());
        }
        let mut edits = HeaderEdits::default();
        if let Some(s) = &self.scheduled {
            if let Some(result) = &s.result {
                for hook in self.scheduler.response_hooks() {
                    hook.on_response_headers(&s.request, result, status);
                    hook.edit_response_headers(&s.request, result, &mut edits);
                }
            }
            if status.is_some_and(|c| c >= 500) {
                self.shared.metrics.error(&s.request.incoming_model, &s.request.target_model, "ModelServerError");
            }
        }
        let mut set = vec![(headers::WENT_INTO_RESP_HEADERS.to_string(), "true".to_string())];
        set.extend(edits.set);
        let mut reply = resp::response_headers(CommonResponse {
            header_mutation: Some(resp::mutation(&set, &edits.remove)),
            ..Default::default()
        });
        if end_of_stream {
            self.attach_final_metadata(&mut reply);
            self.complete();
        }
        vec![reply]
    }

    pub(super) fn on_response_body(&mut self, chunk: Vec<u8>, end_of_stream: bool) -> Vec<ProcessingResponse> {
        if !self.first_response_chunk_seen {
            self.first_response_chunk_seen = true;
            if let Some(Scheduled { request, result: Some(result) }) = &self.scheduled {
                for hook in self.scheduler.response_hooks() {
                    hook.on_first_response_chunk(request, result);
                }
            }
        }
        let restore = self.model_restore();
        let mut out = Vec::new();
        if self.response_streaming {
            if let Some(sse) = &mut self.sse {
                sse.feed(&chunk);
            }
            let chunk = match &restore {
                Some((target, incoming)) => restore_model_name(&chunk, target, incoming).unwrap_or(chunk),
                None => chunk,
            };
            out.push(match self.resp_mode {
                ResponseMode::FullDuplex => resp::streamed_chunk(Direction::Response, chunk, end_of_stream),
                ResponseMode::PerMessage => resp::response_body(CommonResponse::default()),
            });
        } else {
            self.response_buffer.extend_from_slice(&chunk);
            match self.resp_mode {
                ResponseMode::FullDuplex if end_of_stream => {
                    let body = std::mem::take(&mut self.response_buffer);
                    self.usage = usage_from_json(&body);
                    let body = match &restore {
                        Some((target, incoming)) => restore_model_name(&body, target, incoming).unwrap_or(body),
                        None => body,
                    };
                    out.extend(resp::chunked_body(Direction::Response, &body, true));
                }
                ResponseMode::FullDuplex => {}
                ResponseMode::PerMessage => {
                    let mut common = CommonResponse::default();
                    if end_of_stream {
                        let body = std::mem::take(&mut self.response_buffer);
                        self.usage = usage_from_json(&body);
                        if let Some((target, incoming)) = &restore
                            && let Some(restored) = restore_model_name(&body, target, incoming)
                        {
                            common.body_mutation = Some(resp::body_replacement(restored));
                        }
                    }
                    out.push(resp::response_body(common));
                }
            }
        }
        if end_of_stream && let Some(last) = out.last_mut() {
            self.attach_final_metadata(last);
        }
        if end_of_stream {
            let id = self.scheduled.as_ref().map(|s| s.request.request_id.as_str()).unwrap_or_default();
            tracing::info!("x-request-id" = id, "EPP sent response body back to proxy");
            self.complete();
        }
        out
    }

    /// The response usage: the buffered body's, else the SSE stream's.
    fn response_usage(&self) -> Option<Usage> {
        self.usage.or_else(|| self.sse.as_ref().and_then(SseUsageScanner::usage))
    }

    /// Asks the response hooks for dynamic metadata (once per request) and sets it on
    /// `reply`, the final response message.
    pub(super) fn attach_final_metadata(&mut self, reply: &mut ProcessingResponse) {
        if self.metadata_sent {
            return;
        }
        self.metadata_sent = true;
        let Some(Scheduled { request, result: Some(result) }) = &self.scheduled else { return };
        let usage = self.response_usage();
        let mut edits = MetadataEdits::default();
        for hook in self.scheduler.response_hooks() {
            hook.response_metadata(request, result, usage.as_ref(), &mut edits);
        }
        if !edits.is_empty() {
            reply.dynamic_metadata = Some(resp::metadata_struct(&edits));
        }
    }

    /// (target, incoming) when the model name was rewritten and must be restored.
    fn model_restore(&self) -> Option<(String, String)> {
        let s = self.scheduled.as_ref()?;
        (s.request.target_model != s.request.incoming_model && !s.request.incoming_model.is_empty())
            .then(|| (s.request.target_model.clone(), s.request.incoming_model.clone()))
    }

    /// Runs completion accounting once: at response end of stream, or when the stream ends.
    pub fn complete(&mut self) {
        if self.completed {
            return;
        }
        self.completed = true;
        let Some(s) = &self.scheduled else { return };
        let usage = self.response_usage();
        if let Some(result) = &s.result {
            for hook in self.scheduler.response_hooks() {
                hook.on_response_complete(&s.request, result, usage.as_ref());
            }
            self.shared.metrics.finished(
                &s.request.incoming_model,
                &s.request.target_model,
                self.started.elapsed().as_secs_f64(),
                usage.as_ref(),
            );
        }
    }
}
