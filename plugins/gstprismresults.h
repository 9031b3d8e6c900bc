/* prismresults: writes the results of the Prism analysis elements of its pipeline (emdtracker,
 * textureid, bowclassify) as JSON lines, schema prism.results/1 (docs/RESULTS.md), to a file or to
 * standard output: the same lines as `prism run --results`, for gst-launch-1.0 and applications.
 * Buffers pass through untouched (GstBaseTransform passthrough, any caps).
 *
 * Inputs:
 *   sink: anything (ANY caps).
 *
 * Outputs:
 *   src: the input buffers, the same caps.
 *
 * Properties:
 *   location (required): the file (created or emptied at start, unless append) or "-" for standard
 *   output; append (default false): add to an existing file. Both are read at start (READY ->
 *   PAUSED).
 *
 * Messages and meta:
 *   None of its own. A location that cannot be opened fails the state change with an ERROR naming
 *   property 'location' and the file; a write that fails (a full disk, a closed pipe) posts one ERROR
 *   naming them, and later results are dropped.
 *
 * Device memory:
 *   None.
 *
 * Notes:
 *   The results are read from the pipeline's bus, not from the buffers (the whole decision and its
 *   reasons: prism::ResultsBusTap in gst-libs/gst/prism/gstprismresults.h): so prismresults writes
 *   every Prism result of its pipeline, in whichever branch the analysis elements are, and its place
 *   in the pipeline only has to be one that data flows through until EOS (after the analysis
 *   elements: at EOS every result has been written). Each line is written in the thread that posts
 *   the message, in one write(2) on a descriptor opened with O_APPEND: a reader, even after a crash,
 *   sees whole lines. With gst-launch-1.0 and location=-, use -q so that its own lines stay off
 *   standard output.
 */
#pragma once

#include <gst/base/gstbasetransform.h>

G_BEGIN_DECLS

#define GST_TYPE_PRISM_RESULTS (gst_prism_results_get_type())
G_DECLARE_FINAL_TYPE(GstPrismResults, gst_prism_results, GST, PRISM_RESULTS, GstBaseTransform)

GST_ELEMENT_REGISTER_DECLARE(prismresults);

G_END_DECLS
