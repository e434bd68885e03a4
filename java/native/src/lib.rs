//! JNI bindings for the Java client; they land with the Java issue.
