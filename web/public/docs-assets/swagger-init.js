// Starts Swagger UI on the studio's /docs page (src/lorastudio/api/docs_pages.py). A file rather
// than the inline script of FastAPI's page, so that the page's Content-Security-Policy can say
// script-src 'self'. The schema's URL (relative, with the `?token=` the page was opened with) is
// the #swagger-ui element's data-spec-url.
(function () {
  var root = document.getElementById("swagger-ui");
  if (!root || typeof SwaggerUIBundle !== "function") {
    return;
  }
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-spec-url"),
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    // no badge image from validator.swagger.io: the page reaches nothing beyond the studio
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
})();
