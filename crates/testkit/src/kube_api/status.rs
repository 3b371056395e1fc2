//! `Status` error bodies shaped exactly like the API server's: the same fields, the same field
//! order, the same messages (apimachinery `pkg/api/errors/errors.go`, `NewNotFound`,
//! `NewConflict`, `NewInvalid`, `NewGenericServerResponse` …).

use super::resources::Resource;

/// One `StatusCause` (`details.causes[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// `StatusDetails`. Present (possibly empty, serialised as `{}`) whenever the real server sets a
/// non-nil `Details` pointer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: u32,
}

/// A failed request, rendered as a `Status` object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// Boxed: an error travels in every handler's `Result`, and details are rarely needed.
    pub details: Option<Box<Details>>,
}

/// The message the object conflict error carries (etcd3 store `GuaranteedUpdate`).
pub(crate) const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>, details: Option<Details>) -> Self {
        ApiError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: details.map(Box::new),
        }
    }

    fn resource_details(res: Resource, name: &str) -> Details {
        Details {
            name: name.to_owned(),
            group: res.group().to_owned(),
            kind: res.plural().to_owned(),
            ..Details::default()
        }
    }

    pub fn not_found(res: Resource, name: &str) -> Self {
        let message = format!("{} {} not found", res.group_resource(), quote(name));
        Self::new(
            404,
            "NotFound",
            message,
            Some(Self::resource_details(res, name)),
        )
    }

    /// 404 for the Node `name` (a core resource the stand-in serves only as `Route::Node`).
    pub fn node_not_found(name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("nodes {} not found", quote(name)),
            Some(Details {
                name: name.to_owned(),
                kind: "nodes".to_owned(),
                ..Details::default()
            }),
        )
    }

    pub fn already_exists(res: Resource, name: &str) -> Self {
        let message = format!("{} {} already exists", res.group_resource(), quote(name));
        Self::new(
            409,
            "AlreadyExists",
            message,
            Some(Self::resource_details(res, name)),
        )
    }

    pub fn conflict(res: Resource, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} {}: {why}",
            res.group_resource(),
            quote(name)
        );
        Self::new(
            409,
            "Conflict",
            message,
            Some(Self::resource_details(res, name)),
        )
    }

    /// A 409 on an object of a resource the stand-in does not serve (`kind` as the API server
    /// names its group-resource there: the TokenRequest registry says `Node`).
    pub fn conflict_on(kind: &str, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {kind} {}: {why}",
            quote(name)
        );
        let details = Details {
            name: name.to_owned(),
            kind: kind.to_owned(),
            ..Details::default()
        };
        Self::new(409, "Conflict", message, Some(details))
    }

    /// What the authentication filter answers when no authenticator accepted the request.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized", None)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// A path the server has no handler for (`NewGenericServerResponse(404, …)`).
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(Details::default()),
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(Details::default()),
        )
    }

    /// `negotiation.NewUnsupportedMediaTypeError` for a PATCH content type the resource does not
    /// take.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        let message = format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        );
        Self::new(415, "UnsupportedMediaType", message, None)
    }

    /// `NewInvalid`: `{Kind}[.{group}] "{name}" is invalid: {field}: {detail}`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let group_kind = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let bodies: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let aggregate = if bodies.len() == 1 {
            bodies[0].clone()
        } else {
            format!("[{}]", bodies.join(", "))
        };
        let message = format!("{group_kind} {} is invalid: {aggregate}", quote(name));
        let details = Details {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: kind.to_owned(),
            causes,
            ..Details::default()
        };
        Self::new(422, "Invalid", message, Some(details))
    }

    /// A JSON patch that decoded but could not be applied: the server wraps the json-patch
    /// library's error in `NewGenericServerResponse(422, …)`, which drops its text.
    pub fn patch_unprocessable() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
            Some(Details::default()),
        )
    }

    /// The body size limit (`apiserver` `handlers.limitedReadBody`).
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
            None,
        )
    }

    /// `NewResourceExpired`, sent as a watch `ERROR` event for a too old resourceVersion.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message, None)
    }

    pub fn internal(message: &str) -> Self {
        let details = Details {
            causes: vec![Cause {
                message: message.to_owned(),
                ..Cause::default()
            }],
            ..Details::default()
        };
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
            Some(details),
        )
    }

    /// An injected fault: the message `NewGenericServerResponse` gives this code, with the
    /// reason the test chose.
    pub fn injected(code: u16, reason: &str) -> Self {
        let message = match code {
            400 => "the server rejected our request for an unknown reason".to_owned(),
            401 => "the server has asked for the client to provide credentials".to_owned(),
            403 => "forbidden: injected by testkit".to_owned(),
            404 => "the server could not find the requested resource".to_owned(),
            405 => "the server does not allow this method on the requested resource".to_owned(),
            409 => "the server reported a conflict".to_owned(),
            422 => "the server rejected our request due to an error in our request".to_owned(),
            429 => "the server has received too many requests and has asked us to try again later"
                .to_owned(),
            503 => "the server is currently unable to handle the request".to_owned(),
            504 => {
                "the server was unable to return a response in the time allotted, but may still \
                    be processing the request"
                    .to_owned()
            }
            c if c >= 500 => "an error on the server (\"injected by testkit\") has prevented the \
                              request from succeeding"
                .to_owned(),
            c => format!(
                "the server responded with the status code {c} but did not return more information"
            ),
        };
        Self::new(code, reason, message, Some(Details::default()))
    }

    /// The `Status` object as JSON, fields in the API server's order.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push_str(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure""#);
        if !self.message.is_empty() {
            out.push_str(",\"message\":");
            out.push_str(&quote(&self.message));
        }
        if !self.reason.is_empty() {
            out.push_str(",\"reason\":");
            out.push_str(&quote(&self.reason));
        }
        if let Some(d) = &self.details {
            out.push_str(",\"details\":{");
            let mut fields = Vec::new();
            for (key, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
                if !value.is_empty() {
                    fields.push(format!("{}:{}", quote(key), quote(value)));
                }
            }
            if !d.causes.is_empty() {
                let causes: Vec<String> = d
                    .causes
                    .iter()
                    .map(|c| {
                        let mut parts = Vec::new();
                        for (key, value) in [
                            ("reason", &c.reason),
                            ("message", &c.message),
                            ("field", &c.field),
                        ] {
                            if !value.is_empty() {
                                parts.push(format!("{}:{}", quote(key), quote(value)));
                            }
                        }
                        format!("{{{}}}", parts.join(","))
                    })
                    .collect();
                fields.push(format!("\"causes\":[{}]", causes.join(",")));
            }
            if d.retry_after_seconds > 0 {
                fields.push(format!("\"retryAfterSeconds\":{}", d.retry_after_seconds));
            }
            out.push_str(&fields.join(","));
            out.push('}');
        }
        out.push_str(&format!(",\"code\":{}}}", self.code));
        out
    }

    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_json()).expect("Status JSON is well formed")
    }
}

/// A JSON string literal (Go's `%q` gives the same for the names and messages used here).
pub(crate) fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_is_byte_for_byte_the_api_server_body() {
        assert_eq!(
            ApiError::not_found(Resource::Pods, "x").to_json(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#
        );
    }

    #[test]
    fn crd_errors_name_the_group_resource() {
        let e = ApiError::conflict(Resource::NetworkAttachmentDefinitions, "m", MODIFIED);
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on network-attachment-definitions.k8s.cni.cncf.io \"m\": \
             the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(
            e.to_value()["details"],
            serde_json::json!({"name": "m", "group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions"})
        );
    }

    #[test]
    fn unauthorized_has_no_details() {
        assert_eq!(
            ApiError::unauthorized().to_json(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#
        );
    }

    #[test]
    fn invalid_aggregates_field_errors() {
        let e = ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        );
        assert_eq!(
            e.message,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
        assert_eq!(e.code, 422);
    }
}
