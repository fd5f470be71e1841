// Starts Swagger UI on /docs with authledger's own OpenAPI document. A file of
// its own, not an inline script, so the page's Content-Security-Policy can say
// script-src 'self' and nothing more.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: new URL("/openapi.json", window.location.href).href,
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: "StandaloneLayout",
  });
});
