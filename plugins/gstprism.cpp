/* The prism plugin: registers every Prism element. */
#include <gst/gst.h>

#include "gstemdtracker.h"
#include "gstenvisrc.h"
#include "gstpoissonblend.h"
#include "gstprismconvert.h"
#include "gstprismresults.h"
#include "gstspectralize.h"
#include "gstbowclassify.h"
#include "gsttextureid.h"

#ifndef PACKAGE
#define PACKAGE "prism"
#endif

static gboolean plugin_init(GstPlugin *plugin) {
  gboolean ok = FALSE;
  ok |= GST_ELEMENT_REGISTER(prismconvert, plugin);
  ok |= GST_ELEMENT_REGISTER(poissonblend, plugin);
  ok |= GST_ELEMENT_REGISTER(spectralize, plugin);
  ok |= GST_ELEMENT_REGISTER(emdtracker, plugin);
  ok |= GST_ELEMENT_REGISTER(envisrc, plugin);
  ok |= GST_ELEMENT_REGISTER(textureid, plugin);
  ok |= GST_ELEMENT_REGISTER(bowclassify, plugin);
  ok |= GST_ELEMENT_REGISTER(prismresults, plugin);
  return ok;
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, prism,
                  "Prism: real-time video analytics on NVIDIA GPUs (CPU fallback)", plugin_init, PRISM_VERSION, "LGPL",
                  "Prism", "Prism project")
