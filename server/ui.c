/* Implementation of ui.h. */
#include "server/ui.h"

#include <string.h>

const kolo_server_ui_asset *kolo_server_ui_find(const char *url) {
  if (url == NULL) return NULL;
  if (strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0 || strcmp(url, "/ui/") == 0)
    url = "/ui/index.html";
  for (const kolo_server_ui_asset *a = kolo_server_ui_assets; a->path; a++)
    if (strcmp(a->path, url) == 0) return a;
  return NULL;
}

const char *kolo_server_ui_content_type(const char *path) {
  static const char *const types[][2] = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
      {".json", "application/json"},
  };
  const char *dot = path ? strrchr(path, '.') : NULL;
  for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
    if (strcmp(dot, types[i][0]) == 0) return types[i][1];
  return "application/octet-stream";
}
