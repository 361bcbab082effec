# ShellClient: keeps navigation inside the WebView (WebViewClient's default) and, when the main
# page cannot load (server not started yet), shows a short page saying what to do.  Java equivalent:
#
#   public void onReceivedError(WebView v, WebResourceRequest req, WebResourceError err) {
#       if (!req.isForMainFrame()) return;
#       String html = PAGE_HEAD + req.getUrl() + PAGE_TAIL;
#       v.loadData(Base64.encodeToString(html.getBytes(UTF_8), Base64.NO_WRAP), "text/html; charset=utf-8", "base64");
#   }
.class public Lorg/omnidraft/demo/ShellClient;
.super Landroid/webkit/WebViewClient;
.source "ShellClient.smali"


.method public constructor <init>()V
    .registers 1
    invoke-direct {p0}, Landroid/webkit/WebViewClient;-><init>()V
    return-void
.end method


.method public onReceivedError(Landroid/webkit/WebView;Landroid/webkit/WebResourceRequest;Landroid/webkit/WebResourceError;)V
    .registers 8
    # v0-v3 scratch; p0 = v4 (this), p1 = v5 (view), p2 = v6 (request), p3 = v7 (error)
    invoke-interface {p2}, Landroid/webkit/WebResourceRequest;->isForMainFrame()Z
    move-result v0
    if-eqz v0, :done

    invoke-interface {p2}, Landroid/webkit/WebResourceRequest;->getUrl()Landroid/net/Uri;
    move-result-object v1
    invoke-virtual {v1}, Landroid/net/Uri;->toString()Ljava/lang/String;
    move-result-object v1

    new-instance v0, Ljava/lang/StringBuilder;
    invoke-direct {v0}, Ljava/lang/StringBuilder;-><init>()V
    const-string v2, "<!doctype html><meta name=viewport content='width=device-width,initial-scale=1'><body style='font:17px/1.5 sans-serif;margin:24px;color:#16201b'><h1 style='font-size:22px'>omnidraft server not reachable</h1><p>Nothing answers at <code>"
    invoke-virtual {v0, v2}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    invoke-virtual {v0, v1}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    const-string v2, "</code>.</p><p>Start it in Termux:</p><pre style='background:#eef3f0;padding:12px;white-space:pre-wrap'>bash ~/omnidraft/android_demo/termux/run.sh</pre><p>Another server: <code>am start -n org.omnidraft.demo/.MainActivity -e url http://HOST:8080/app/</code></p><p><a style='display:inline-block;padding:12px 20px;background:#144d2e;color:#fff;border-radius:24px;text-decoration:none' href='"
    invoke-virtual {v0, v2}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    invoke-virtual {v0, v1}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    const-string v2, "'>Retry</a></p></body>"
    invoke-virtual {v0, v2}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    invoke-virtual {v0}, Ljava/lang/StringBuilder;->toString()Ljava/lang/String;
    move-result-object v0

    const-string v1, "UTF-8"
    invoke-virtual {v0, v1}, Ljava/lang/String;->getBytes(Ljava/lang/String;)[B
    move-result-object v0
    const/4 v1, 0x2
    invoke-static {v0, v1}, Landroid/util/Base64;->encodeToString([BI)Ljava/lang/String;
    move-result-object v0
    const-string v1, "text/html; charset=utf-8"
    const-string v2, "base64"
    invoke-virtual {p1, v0, v1, v2}, Landroid/webkit/WebView;->loadData(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;)V

    :done
    return-void
.end method
