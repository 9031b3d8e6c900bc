/* The per-frame bus message of Prism's analysis elements (emdtracker, textureid, bowclassify).
 *
 * One rule for all of them, so an application reads every element the same way:
 *  - an element message (GST_MESSAGE_ELEMENT) whose structure is named "prism-ELEMENT"
 *    (prism-emdtracker, prism-textureid, prism-bowclassify): the element's kind, not its instance
 *    name (that is the message's source);
 *  - the frame's time, as level and facedetect give it: `timestamp` (the buffer's PTS),
 *    `stream-time`, `running-time` (both from the element's segment) and `duration`, all guint64
 *    nanoseconds, GST_CLOCK_TIME_NONE (G_MAXUINT64) when unknown;
 *  - `frame` (guint64): the frame's index since the element started, counting every frame
 *    (emdtracker: since its caps were set, as new caps restart its tracking);
 *  - `camera` and `camera-uri` (strings) when the element has a camera (gstprismcudafilter.h);
 *  - then the element's own results (README.md, per element).
 * `prism run` posts one more kind, "prism-camera", from a camera's source element when the camera
 * goes online or offline (pipelines/camera_supervisor.h): `camera`, `camera-uri`, `state`, `reason`
 * and `reconnects`, with the time fields unknown.
 * The same results also ride on the frame as GstVideoRegionOfInterestMeta params where there is a
 * region to name.
 */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* A new structure named "prism-<element_kind>" with the time fields and `frame` set for `buf` in
 * `segment` (TIME format; other formats give GST_CLOCK_TIME_NONE). Add results, then post it. */
GstStructure *gst_prism_frame_message_new(const gchar *element_kind, const GstSegment *segment, GstBuffer *buf,
                                          guint64 frame);

/* Sets `field` of `s` to a GstValueArray of the `n` doubles of `values`: an ordered list of numbers
 * (textureid's homography and quad), a JSON array in the results' lines. */
void gst_prism_structure_set_doubles(GstStructure *s, const gchar *field, const gdouble *values, guint n);

/* Posts `s` (taken) as an element message from `element`. */
void gst_prism_post_frame_message(GstElement *element, GstStructure *s);

G_END_DECLS
