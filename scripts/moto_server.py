"""moto_server with the one S3 answer moto 5.2.5 leaves out.

moto stores a bucket's `<EventBridgeConfiguration/>` and delivers its events to EventBridge
rules, but `GET /BUCKET?notification` does not return the element (AWS does). Setup and check
of slate's EventBridge route read it back, so this adds it to that one answer when the bucket
has it on. Everything else is moto as published; it is started as `moto_server` is.
"""

import re
import sys

from moto.s3.responses import S3Response

_get_notification = S3Response.get_bucket_notification
_TAG = "<EventBridgeConfiguration></EventBridgeConfiguration>"


def get_bucket_notification(self):
    answer = _get_notification(self)
    config = self.backend.get_bucket_notification_configuration(self.bucket_name)
    if config is None or getattr(config, "event_bridge", None) is None:
        return answer
    status, headers, body = answer
    text = body.decode() if isinstance(body, bytes) else body
    if "</NotificationConfiguration>" in text:
        text = text.replace("</NotificationConfiguration>", _TAG + "</NotificationConfiguration>", 1)
    else:
        text = re.sub(
            r"<NotificationConfiguration([^>]*)/>",
            r"<NotificationConfiguration\1>" + _TAG + "</NotificationConfiguration>",
            text,
            count=1,
        )
    return status, headers, text


S3Response.get_bucket_notification = get_bucket_notification

from moto.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
