#include "gstprismresults.h"

#include "gst/prism/gstprismresults.h"

enum { PROP_0, PROP_LOCATION, PROP_APPEND };

struct _GstPrismResults {
  GstBaseTransform parent;
  /* properties (object lock) */
  gchar *location;
  gboolean append;
  prism::ResultsBusTap *tap;
};

G_DEFINE_TYPE(GstPrismResults, gst_prism_results, GST_TYPE_BASE_TRANSFORM);
GST_ELEMENT_REGISTER_DEFINE(prismresults, "prismresults", GST_RANK_NONE, GST_TYPE_PRISM_RESULTS);

static GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);
static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstPrismResults *self = GST_PRISM_RESULTS(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_LOCATION:
      g_free(self->location);
      self->location = g_value_dup_string(value);
      break;
    case PROP_APPEND: self->append = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec); break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstPrismResults *self = GST_PRISM_RESULTS(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_LOCATION: g_value_set_string(value, self->location); break;
    case PROP_APPEND: g_value_set_boolean(value, self->append); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec); break;
  }
  GST_OBJECT_UNLOCK(self);
}

static gboolean start(GstBaseTransform *trans) {
  GstPrismResults *self = GST_PRISM_RESULTS(trans);
  GST_OBJECT_LOCK(self);
  gchar *location = g_strdup(self->location);
  const gboolean append = self->append;
  GST_OBJECT_UNLOCK(self);
  const gboolean ok = self->tap->start(GST_ELEMENT(self), location, append);
  g_free(location);
  return ok;
}

static gboolean stop(GstBaseTransform *trans) {
  GST_PRISM_RESULTS(trans)->tap->stop();
  return TRUE;
}

static GstFlowReturn transform_ip(GstBaseTransform *, GstBuffer *) { return GST_FLOW_OK; }

static void finalize(GObject *object) {
  GstPrismResults *self = GST_PRISM_RESULTS(object);
  delete self->tap;
  g_free(self->location);
  G_OBJECT_CLASS(gst_prism_results_parent_class)->finalize(object);
}

static void gst_prism_results_class_init(GstPrismResultsClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  oc->set_property = set_property;
  oc->get_property = get_property;
  oc->finalize = finalize;
  const GParamFlags rw = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      oc, PROP_LOCATION,
      g_param_spec_string("location", "Location",
                          "File to write the results to as JSON lines (prism.results/1), or '-' for standard output",
                          nullptr, rw));
  g_object_class_install_property(
      oc, PROP_APPEND,
      g_param_spec_boolean("append", "Append", "Add to an existing file instead of emptying it", FALSE, rw));
  gst_element_class_set_static_metadata(element_class, "Prism results", "Filter/Analyzer",
                                        "Writes the results of the Prism analysis elements of its pipeline as JSON "
                                        "lines (prism.results/1) to a file or standard output; buffers pass through",
                                        "Prism developers");
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  trans_class->stop = GST_DEBUG_FUNCPTR(stop);
  trans_class->transform_ip = GST_DEBUG_FUNCPTR(transform_ip);
  trans_class->passthrough_on_same_caps = TRUE;
}

static void gst_prism_results_init(GstPrismResults *self) {
  self->tap = new prism::ResultsBusTap();
  gst_base_transform_set_passthrough(GST_BASE_TRANSFORM(self), TRUE);
}
